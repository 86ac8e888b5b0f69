// TypeScript declarations for wgslc.js: runs a wgslc artifact on WebGPU in a browser.

/// <reference types="@webgpu/types" />

/** The plan.json format identifier and the schema version this module reads. */
export const FORMAT: "wgslc-plan";
export const VERSION: 2;

/**
 * A graph input or output: its name, the dtype the model declares ("float32", "int64", "bool", …) and its shape.
 * In an artifact compiled with a ranged dim (`--dim NAME=MIN..MAX`), `ranged` names the axes that follow one:
 * `shape[axis]` is `factor · max`, and a run takes (and returns) `factor · n` for any `n` in the dim's range.
 */
export interface TensorInfo {
  name: string;
  dtype: string;
  shape: number[];
  ranged?: { axis: number; dim: number; factor: number }[];
}

/**
 * An input value: a typed array of the input's element count (Float32Array for float inputs; Int32Array,
 * BigInt64Array or any other integer array for integer inputs, range-checked into i32; Uint8Array or boolean[]
 * for bool), a plain array of numbers, or `{ data, shape }` to have the shape checked too (and to give the length
 * of a ranged dim; a typed array alone does where the input has one ranged axis).
 */
export type InputData =
  | Float32Array
  | Float16Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Uint8ClampedArray
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array
  | BigUint64Array
  | number[]
  | boolean[];
export type Input = InputData | { data: InputData; shape?: number[] };

/**
 * An output: Float32Array for float32 (and bfloat16 and the 8-bit floats, whose values it holds exactly),
 * Float16Array for float16 where the browser has it (else Uint16Array of the float16 bits, rounded to nearest
 * even), Float64Array for float64, BigInt64Array for int64, Int32Array for int32, the matching typed array for
 * other integer types, Uint8Array of 0/1 for bool. A float16 or bfloat16 input takes a Float32Array, a
 * Float16Array, or a Uint16Array of its bits.
 */
export interface Output {
  data: Float32Array | Float16Array | Float64Array | Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array;
  shape: number[];
}

/** Per-kernel GPU times of one run, in dispatch order. */
export interface Profile {
  /** true: timestamp queries around each dispatch; false: each dispatch submitted and awaited on its own. */
  timestamps: boolean;
  kernels: { name: string; ms: number }[];
}

/** Where loadSession's time went; each pipeline's ms is from its request until it was ready (compiled in parallel). */
export interface LoadStats {
  totalMs: number;
  weightsMs: number;
  pipelines: { name: string; ms: number }[];
}

export interface LoadOptions {
  /** Run on this device instead of requesting one; it must meet the plan's limits. */
  device?: GPUDevice;
  /** Adapter preference when the session requests its own device (default "high-performance"). */
  powerPreference?: GPUPowerPreference;
  /** The fetch used for weights.safetensors (default globalThis.fetch). */
  fetch?: typeof fetch;
  /**
   * false: every kernel replays its plain module. By default a kernel with a subgroup module replays that where the
   * device has the `subgroups` feature (requested when the session requests its device) with subgroups of 4 to 128
   * invocations and WGSL has the `subgroup_id` builtin.
   */
  subgroups?: boolean;
}

export interface RunOptions {
  /** Time each kernel (timestamp-query where the device has it); see Session.lastProfile. */
  profile?: boolean;
}

export interface GenerateOptions {
  /** Tokens to generate after the prompt (default 32). */
  maxNewTokens?: number;
  /** Stop after this token id (kept in the result). */
  eos?: number;
  /** Decode steps per submit (default 16); with eos or onToken the tokens are read back after each submit. */
  stepsPerSubmit?: number;
  /** Called for each new token as it is read back, with its index in the result's tokens. */
  onToken?: (id: number, index: number) => void;
  /**
   * Sample at this temperature instead of taking the most likely token (0 is greedy). Any of temperature, topK and
   * seed samples; the others default to 1, 0 and a random seed.
   */
  temperature?: number;
  /** Sample among the topK most likely tokens (ties with the last kept); 0 keeps the whole vocabulary. */
  topK?: number;
  /** The sampling seed (its low 32 bits xor the high ones): the same seed draws the same tokens in both runtimes. */
  seed?: number;
}

export interface Generation {
  /** The prompt followed by the generated tokens. */
  tokens: number[];
  prefillMs: number;
  decodeMs: number;
  /** Decode steps run (tokens after the first). */
  decodeSteps: number;
  submits: number;
  /** The seed drawn with, when sampling. */
  seed?: number;
}

export declare class Session {
  /** Graph inputs in model order. */
  readonly inputs: TensorInfo[];
  /** Graph outputs in model order. */
  readonly outputs: TensorInfo[];
  readonly device: GPUDevice;
  /** The adapter's info when the session requested its own device, else null. */
  readonly adapterInfo: GPUAdapterInfo | null;
  /** Whether kernels replay their subgroup modules. */
  readonly subgroups: boolean;
  /** plan.json as read. */
  readonly plan: unknown;
  readonly loadStats: LoadStats;
  /** The profile of the last run with { profile: true }, or null. */
  lastProfile: Profile | null;
  /**
   * Runs the plan once: a few submits of a compute pass each (artifact.js's submitRanges, as the Rust runtime), the
   * GPU running the first while the rest are encoded. Runs on one session are serialized.
   */
  run(inputs: Record<string, Input>, options?: RunOptions): Promise<Record<string, Output>>;
  /**
   * Replays without reading outputs back, each replay waited for; resolves to the wall time per replay and the CPU
   * time per replay spent encoding and submitting, in milliseconds. For benchmarks.
   */
  timeReplay(iterations: number): Promise<{ ms: number; encodeMs: number }>;
  /**
   * Generation (greedy, or sampled with temperature/topK/seed) on a decoder artifact (`wgslc compile --kv-cache`): the prompt in prefill steps, then one
   * decode step per token, the KV cache and the chosen tokens on the GPU. Rejects when prompt plus maxNewTokens
   * exceeds the cache's capacity, or the artifact has no decoder section.
   */
  generate(promptIds: ArrayLike<number | bigint>, options?: GenerateOptions): Promise<Generation>;
  /** Frees the session's buffers (and its device, when the session requested it). */
  destroy(): void;
}

/** Loads the artifact directory at `url`: plan.json, kernels/*.wgsl and weights.safetensors (streamed). */
export declare function loadSession(url: string | URL, options?: LoadOptions): Promise<Session>;

/** Parses and checks plan.json's text; throws an Error naming what is wrong. */
export declare function parsePlan(text: string): unknown;
