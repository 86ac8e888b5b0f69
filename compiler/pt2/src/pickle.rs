//! The subset of Python's pickle that `torch.save` writes for a dict of tensors (protocols 2–4), enough to read
//! the weights of torch 2.6–2.8 archives (`serialized_state_dict.pt`, `data/weights/<model>.pt`). No Python object
//! is ever constructed: `GLOBAL`s stay names, and `REDUCE` is understood for the few callables a state dict uses
//! (`collections.OrderedDict`, `torch._utils._rebuild_tensor_v2`, `torch._utils._rebuild_parameter`); anything else
//! becomes an opaque value, which is an error only if a tensor is looked up through it.
//!
//! A `torch.save` file is itself a ZIP: `<name>/data.pkl` (the pickle), `<name>/data/<key>` (each storage's raw
//! little-endian bytes) and `<name>/byteorder`.

use std::collections::HashMap;

/// A value on the pickle machine's stack.
#[derive(Clone, Debug)]
pub enum Value {
    None,
    Bool,
    Int(i64),
    /// Floats and bools are never read (a state dict's tensors are described by ints and strings).
    Float,
    Str(String),
    Bytes,
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// `module.name`, not resolved.
    Global(String, String),
    /// A storage reference (`persistent_load`): its element type (torch's legacy storage class name, e.g.
    /// `FloatStorage`) and the key of its data file.
    Storage {
        class: String,
        key: String,
    },
    /// `_rebuild_tensor_v2(storage, offset, size, stride, ...)` (and `_rebuild_parameter` of one).
    Tensor(TensorRef),
    /// A REDUCE of a callable this reader does not model (an error only if a tensor is looked up through it).
    Opaque,
    Mark,
}

/// A tensor in a `torch.save` file: a strided view of one storage.
#[derive(Clone, Debug)]
pub struct TensorRef {
    pub class: String,
    pub key: String,
    pub offset: i64,
    pub size: Vec<i64>,
    pub stride: Vec<i64>,
}

/// Runs the pickle program and returns its result.
pub fn load(data: &[u8]) -> Result<Value, String> {
    let mut m = Machine { data, pos: 0, stack: Vec::new(), memo: HashMap::new() };
    m.run()
}

/// The tensors of a (nested) dict of tensors, by key; `Opaque` values holding none are skipped.
pub fn tensors(v: &Value) -> Result<Vec<(String, TensorRef)>, String> {
    let Value::Dict(items) = v else { return Err("the pickle does not hold a dict".into()) };
    let mut out = Vec::new();
    for (k, v) in items {
        let Value::Str(k) = k else { continue };
        if let Value::Tensor(t) = v {
            out.push((k.clone(), t.clone()));
        }
    }
    Ok(out)
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    stack: Vec<Value>,
    memo: HashMap<u32, Value>,
}

/// Bounds what a hostile pickle can make the reader allocate.
const MAX_STACK: usize = 1 << 20;
const MAX_MEMO: usize = 1 << 20;

impl Machine<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len()).ok_or("the pickle is truncated")?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn line(&mut self) -> Result<String, String> {
        let rest = &self.data[self.pos..];
        let end = rest.iter().position(|&b| b == b'\n').ok_or("the pickle is truncated")?;
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }

    fn pop(&mut self) -> Result<Value, String> {
        self.stack.pop().ok_or_else(|| "the pickle pops an empty stack".to_string())
    }

    fn push(&mut self, v: Value) -> Result<(), String> {
        if self.stack.len() >= MAX_STACK {
            return Err("the pickle's stack is too deep".into());
        }
        self.stack.push(v);
        Ok(())
    }

    /// Pops everything down to the topmost MARK.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let at = self.stack.iter().rposition(|v| matches!(v, Value::Mark)).ok_or("the pickle has no MARK")?;
        let items = self.stack.split_off(at + 1);
        self.stack.pop();
        Ok(items)
    }

    fn memoize(&mut self, k: u32) -> Result<(), String> {
        let top = self.stack.last().ok_or("the pickle memoizes an empty stack")?.clone();
        if self.memo.len() >= MAX_MEMO {
            return Err("the pickle's memo is too large".into());
        }
        self.memo.insert(k, top);
        Ok(())
    }

    fn get(&mut self, k: u32) -> Result<(), String> {
        let v = self.memo.get(&k).cloned().ok_or_else(|| format!("the pickle reads memo {k}, never written"))?;
        self.push(v)
    }

    fn str(&mut self, n: usize) -> Result<(), String> {
        let s = String::from_utf8_lossy(self.take(n)?).into_owned();
        self.push(Value::Str(s))
    }

    fn run(&mut self) -> Result<Value, String> {
        loop {
            let op = self.u8()?;
            match op {
                0x80 => {
                    self.u8()?; // PROTO
                }
                0x95 => {
                    self.take(8)?; // FRAME
                }
                b'.' => return self.pop(),
                b'(' => self.push(Value::Mark)?,
                b'N' => self.push(Value::None)?,
                0x88 => self.push(Value::Bool)?,
                0x89 => self.push(Value::Bool)?,
                b'K' => {
                    let v = self.u8()? as i64;
                    self.push(Value::Int(v))?
                }
                b'M' => {
                    let b = self.take(2)?;
                    let v = u16::from_le_bytes([b[0], b[1]]) as i64;
                    self.push(Value::Int(v))?
                }
                b'J' => {
                    let v = self.u32()? as i32 as i64;
                    self.push(Value::Int(v))?
                }
                0x8a => {
                    // LONG1: little-endian two's complement of n bytes.
                    let n = self.u8()? as usize;
                    let b = self.take(n)?;
                    if n > 8 {
                        return Err("the pickle holds an integer wider than 64 bits".into());
                    }
                    let mut v: i64 = 0;
                    for (i, &x) in b.iter().enumerate() {
                        v |= (x as i64) << (8 * i);
                    }
                    if n > 0 && n < 8 && b[n - 1] & 0x80 != 0 {
                        v -= 1i64 << (8 * n);
                    }
                    self.push(Value::Int(v))?
                }
                b'G' => {
                    self.take(8)?;
                    self.push(Value::Float)?
                }
                b'X' => {
                    let n = self.u32()? as usize;
                    self.str(n)?
                }
                0x8c => {
                    let n = self.u8()? as usize;
                    self.str(n)?
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.take(8)?.try_into().unwrap());
                    self.str(usize::try_from(n).map_err(|_| "the pickle is truncated")?)?
                }
                b'C' => {
                    let n = self.u8()? as usize;
                    self.take(n)?;
                    self.push(Value::Bytes)?
                }
                b'B' => {
                    let n = self.u32()? as usize;
                    self.take(n)?;
                    self.push(Value::Bytes)?
                }
                b')' => self.push(Value::Tuple(vec![]))?,
                b't' => {
                    let items = self.pop_mark()?;
                    self.push(Value::Tuple(items))?
                }
                0x85..=0x87 => {
                    let n = (op - 0x84) as usize;
                    if self.stack.len() < n {
                        return Err("the pickle pops an empty stack".into());
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.push(Value::Tuple(items))?
                }
                b']' => self.push(Value::List(vec![]))?,
                b'l' => {
                    let items = self.pop_mark()?;
                    self.push(Value::List(items))?
                }
                b'}' => self.push(Value::Dict(vec![]))?,
                b'd' => {
                    let items = self.pop_mark()?;
                    let pairs = pairs(items)?;
                    self.push(Value::Dict(pairs))?
                }
                b'a' => {
                    let v = self.pop()?;
                    match self.stack.last_mut() {
                        Some(Value::List(l)) => l.push(v),
                        _ => return Err("APPEND to a non-list".into()),
                    }
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    match self.stack.last_mut() {
                        Some(Value::List(l)) => l.extend(items),
                        _ => return Err("APPENDS to a non-list".into()),
                    }
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    match self.stack.last_mut() {
                        Some(Value::Dict(d)) => d.push((k, v)),
                        Some(Value::Opaque) => {}
                        _ => return Err("SETITEM on a non-dict".into()),
                    }
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let p = pairs(items)?;
                    match self.stack.last_mut() {
                        Some(Value::Dict(d)) => d.extend(p),
                        Some(Value::Opaque) => {}
                        _ => return Err("SETITEMS on a non-dict".into()),
                    }
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.push(Value::Global(module, name))?
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    match (module, name) {
                        (Value::Str(m), Value::Str(n)) => self.push(Value::Global(m, n))?,
                        _ => return Err("STACK_GLOBAL of non-strings".into()),
                    }
                }
                b'q' => {
                    let k = self.u8()? as u32;
                    self.memoize(k)?
                }
                b'r' => {
                    let k = self.u32()?;
                    self.memoize(k)?
                }
                0x94 => {
                    let k = self.memo.len() as u32;
                    self.memoize(k)?
                }
                b'h' => {
                    let k = self.u8()? as u32;
                    self.get(k)?
                }
                b'j' => {
                    let k = self.u32()?;
                    self.get(k)?
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = persistent(pid)?;
                    self.push(v)?
                }
                b'R' => {
                    let args = self.pop()?;
                    let f = self.pop()?;
                    let v = reduce(f, args)?;
                    self.push(v)?
                }
                0x81 => {
                    // NEWOBJ: cls.__new__(cls, *args)
                    let _args = self.pop()?;
                    let cls = self.pop()?;
                    let v = reduce(cls, Value::Tuple(vec![]))?;
                    self.push(v)?
                }
                b'b' => {
                    // BUILD: set an object's state; a state dict's `_metadata` and a parameter's are dropped.
                    self.pop()?;
                }
                b'0' => {
                    self.pop()?;
                }
                b'2' => {
                    let top = self.stack.last().ok_or("DUP of an empty stack")?.clone();
                    self.push(top)?
                }
                other => return Err(format!("the pickle uses opcode 0x{other:02x}, which this reader does not know")),
            }
        }
    }
}

fn pairs(items: Vec<Value>) -> Result<Vec<(Value, Value)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err("a dict with an odd number of items".into());
    }
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

/// `('storage', <class>, key, location, numel)`.
fn persistent(pid: Value) -> Result<Value, String> {
    let Value::Tuple(t) = pid else { return Err("a persistent id that is not a tuple".into()) };
    match t.as_slice() {
        [Value::Str(tag), Value::Global(_, class), Value::Str(key), ..] if tag == "storage" => {
            Ok(Value::Storage { class: class.clone(), key: key.clone() })
        }
        _ => Err("a persistent id other than a tensor storage".into()),
    }
}

fn ints(v: &Value) -> Result<Vec<i64>, String> {
    match v {
        Value::Tuple(items) | Value::List(items) => items
            .iter()
            .map(|x| match x {
                Value::Int(i) => Ok(*i),
                _ => Err("a tensor size or stride that is not an integer".to_string()),
            })
            .collect(),
        _ => Err("a tensor size or stride that is not a tuple".into()),
    }
}

fn reduce(f: Value, args: Value) -> Result<Value, String> {
    let Value::Global(module, name) = f else { return Ok(Value::Opaque) };
    let args = match args {
        Value::Tuple(a) => a,
        _ => return Err(format!("{module}.{name} called with arguments that are not a tuple")),
    };
    match (module.as_str(), name.as_str()) {
        ("collections", "OrderedDict") | ("builtins", "dict") => Ok(Value::Dict(vec![])),
        ("torch._utils", "_rebuild_tensor_v2") | ("torch._utils", "_rebuild_tensor") => match args.as_slice() {
            [Value::Storage { class, key }, Value::Int(offset), size, stride, ..] => Ok(Value::Tensor(TensorRef {
                class: class.clone(),
                key: key.clone(),
                offset: *offset,
                size: ints(size)?,
                stride: ints(stride)?,
            })),
            _ => Err("_rebuild_tensor_v2 with unexpected arguments".into()),
        },
        ("torch._utils", "_rebuild_parameter") | ("torch._utils", "_rebuild_parameter_with_state") => {
            match args.into_iter().next() {
                Some(t @ Value::Tensor(_)) => Ok(t),
                _ => Err("_rebuild_parameter of something that is not a tensor".into()),
            }
        }
        _ => Ok(Value::Opaque),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pickle.dumps(collections.OrderedDict(a=torch.zeros(2,3)), protocol=2)` as torch.save writes it, by hand:
    /// GLOBAL OrderedDict, REDUCE (), then SETITEMS with one `_rebuild_tensor_v2` over a persistent storage.
    #[test]
    fn reads_a_state_dict_of_one_tensor() {
        let mut p: Vec<u8> = vec![0x80, 2];
        p.extend(b"ccollections\nOrderedDict\nq\x00)Rq\x01(X\x01\x00\x00\x00a");
        p.extend(b"ctorch._utils\n_rebuild_tensor_v2\nq\x02((X\x07\x00\x00\x00storageq\x03ctorch\nFloatStorage\nq\x04");
        p.extend(
            b"X\x01\x00\x00\x000q\x05X\x03\x00\x00\x00cpuq\x06K\x06tq\x07QK\x00K\x02K\x03\x86q\x08K\x03K\x01\x86q\x09",
        );
        p.extend(b"\x89ccollections\nOrderedDict\nq\x0a)Rq\x0btq\x0cRq\x0du.");
        let v = load(&p).unwrap();
        let t = tensors(&v).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].0, "a");
        assert_eq!((t[0].1.class.as_str(), t[0].1.key.as_str()), ("FloatStorage", "0"));
        assert_eq!((t[0].1.size.clone(), t[0].1.stride.clone()), (vec![2, 3], vec![3, 1]));
    }

    #[test]
    fn hostile_pickles_are_errors() {
        for bad in
            [&b""[..], b"\x80\x02(", b"\x80\x02h\x05.", b"\x80\x02t.", b"\x80\x02\xff", b"\x80\x02X\xff\xff\xff\xff"]
        {
            assert!(load(bad).is_err(), "{bad:?}");
        }
    }
}
