//! Symbolic sizes as torch writes them, evaluated once the symbols are bound: sympy's `srepr` (torch ≥ 2.9:
//! `Symbol('s77', positive=True, integer=True)`, `Add(Symbol('s0', ...), Integer(1))`, `FloorDiv(...)`) and its
//! plain printing (older exports: `s0`, `s77 + 1`, `2*s0`, `(s0//2)`, `Max(1, s0)`).

use std::collections::HashMap;

/// A symbol the expression needs and nobody bound.
#[derive(Debug)]
pub struct Unbound(pub String);

/// Whether `expr` names the symbol `name`.
pub fn mentions(expr: &str, name: &str) -> bool {
    tokens(expr).is_ok_and(|t| t.iter().any(|t| matches!(t, Tok::Ident(i) | Tok::Str(i) if i == name)))
}

/// The symbol `expr` is, if it is one alone (`s0`, `Symbol('s0', positive=True)`).
pub fn as_symbol(expr: &str) -> Option<String> {
    let toks = tokens(expr).ok()?;
    match toks.as_slice() {
        [Tok::Ident(s)] => Some(s.clone()),
        [Tok::Ident(f), Tok::Op("("), Tok::Str(s), ..] if f == "Symbol" => Some(s.clone()),
        _ => None,
    }
}

/// Evaluates `expr` with `dims`. An expression that does not parse is an error naming it (as `Unbound` of the
/// whole text, which the caller reports).
pub fn eval(expr: &str, dims: &HashMap<String, i64>) -> Result<i64, Unbound> {
    let toks = tokens(expr).map_err(|_| Unbound(expr.to_string()))?;
    let mut p = Parser { toks: &toks, pos: 0, dims };
    let v = p.sum()?;
    if p.pos != toks.len() {
        return Err(Unbound(expr.to_string()));
    }
    Ok(v)
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Int(i64),
    Ident(String),
    Str(String),
    Op(&'static str),
}

fn tokens(s: &str) -> Result<Vec<Tok>, ()> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let st = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push(Tok::Int(s[st..i].parse().map_err(|_| ())?));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Ident(s[st..i].to_string()));
        } else if c == b'\'' || c == b'"' {
            let st = i + 1;
            i = st;
            while i < b.len() && b[i] != c {
                i += 1;
            }
            if i >= b.len() {
                return Err(());
            }
            out.push(Tok::Str(s[st..i].to_string()));
            i += 1;
        } else if s[i..].starts_with("//") {
            out.push(Tok::Op("//"));
            i += 2;
        } else {
            let op = match c {
                b'+' => "+",
                b'-' => "-",
                b'*' => "*",
                b'%' => "%",
                b'(' => "(",
                b')' => ")",
                b',' => ",",
                b'=' => "=",
                _ => return Err(()),
            };
            out.push(Tok::Op(op));
            i += 1;
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: &'a [Tok],
    pos: usize,
    dims: &'a HashMap<String, i64>,
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn eat(&mut self, op: &str) -> bool {
        if self.peek()
            == Some(&Tok::Op(match op {
                "+" => "+",
                "-" => "-",
                "*" => "*",
                "//" => "//",
                "%" => "%",
                "(" => "(",
                ")" => ")",
                "=" => "=",
                _ => ",",
            }))
        {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// Skips keyword arguments up to the closing parenthesis.
    fn skip_to_close(&mut self) -> Result<(), Unbound> {
        let mut depth = 0;
        while let Some(t) = self.peek().cloned() {
            self.pos += 1;
            match t {
                Tok::Op("(") => depth += 1,
                Tok::Op(")") if depth == 0 => return Ok(()),
                Tok::Op(")") => depth -= 1,
                _ => {}
            }
        }
        Err(self.bad())
    }

    fn bad(&self) -> Unbound {
        Unbound(self.toks.iter().map(|t| format!("{t:?}")).collect::<Vec<_>>().join(" "))
    }

    fn sum(&mut self) -> Result<i64, Unbound> {
        let mut v = self.product()?;
        loop {
            if self.eat("+") {
                v = v.wrapping_add(self.product()?);
            } else if self.eat("-") {
                v = v.wrapping_sub(self.product()?);
            } else {
                return Ok(v);
            }
        }
    }

    fn product(&mut self) -> Result<i64, Unbound> {
        let mut v = self.unary()?;
        loop {
            if self.eat("*") {
                v = v.wrapping_mul(self.unary()?);
            } else if self.eat("//") {
                let d = self.unary()?;
                v = if d == 0 { return Err(self.bad()) } else { v.div_euclid(d) };
            } else if self.eat("%") {
                let d = self.unary()?;
                v = if d == 0 { return Err(self.bad()) } else { v.rem_euclid(d) };
            } else {
                return Ok(v);
            }
        }
    }

    fn unary(&mut self) -> Result<i64, Unbound> {
        if self.eat("-") {
            return Ok(self.unary()?.wrapping_neg());
        }
        self.atom()
    }

    fn atom(&mut self) -> Result<i64, Unbound> {
        match self.peek().cloned() {
            Some(Tok::Int(v)) => {
                self.pos += 1;
                Ok(v)
            }
            Some(Tok::Op("(")) => {
                self.pos += 1;
                let v = self.sum()?;
                if !self.eat(")") {
                    return Err(self.bad());
                }
                Ok(v)
            }
            Some(Tok::Ident(name)) => {
                self.pos += 1;
                if self.eat("(") {
                    if name == "Symbol" {
                        // Symbol('s0', positive=True, integer=True): the name, then assumptions.
                        let Some(Tok::Str(sym)) = self.peek().cloned() else { return Err(self.bad()) };
                        self.pos += 1;
                        self.skip_to_close()?;
                        return self.dims.get(&sym).copied().ok_or(Unbound(sym));
                    }
                    let mut args = vec![self.sum()?];
                    while self.eat(",") {
                        args.push(self.sum()?);
                    }
                    if !self.eat(")") {
                        return Err(self.bad());
                    }
                    return match (name.as_str(), args.as_slice()) {
                        ("Integer", [a]) => Ok(*a),
                        ("Add", _) => Ok(args.iter().fold(0i64, |s, &x| s.wrapping_add(x))),
                        ("Mul", _) => Ok(args.iter().fold(1i64, |s, &x| s.wrapping_mul(x))),
                        ("Pow", [a, b]) if *b >= 0 => Ok(a.wrapping_pow(*b as u32)),
                        ("FloorDiv" | "IntTrueDiv", [a, b]) if *b != 0 => Ok(a.div_euclid(*b)),
                        ("CeilDiv" | "CleanDiv", [a, b]) if *b != 0 => Ok(-(-a).div_euclid(*b)),
                        ("Mod" | "PythonMod", [a, b]) if *b != 0 => Ok(a.rem_euclid(*b)),
                        ("Max", _) => Ok(*args.iter().max().unwrap()),
                        ("Min", _) => Ok(*args.iter().min().unwrap()),
                        _ => Err(Unbound(format!("{name}(...)"))),
                    };
                }
                self.dims.get(&name).copied().ok_or(Unbound(name))
            }
            _ => Err(self.bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evaluates_what_sympy_prints() {
        let dims: HashMap<String, i64> = [("s0".to_string(), 7), ("s77".to_string(), 3)].into();
        for (e, v) in [
            ("s0", 7),
            ("s77 + 1", 4),
            ("2*s0", 14),
            ("s0 + s77", 10),
            ("(s0//2)", 3),
            ("FloorDiv(s0, 2)", 3),
            ("Max(1, s0 - 8)", 1),
            ("-s77 + s0", 4),
            ("12", 12),
            ("Symbol('s77', positive=True, integer=True)", 3),
            ("Add(Symbol('s0', positive=True, integer=True), Integer(1))", 8),
            ("Mul(Integer(2), Symbol('s77', integer=True))", 6),
            ("FloorDiv(Add(Symbol('s0'), Integer(-1)), Integer(2))", 3),
        ] {
            assert_eq!(eval(e, &dims).unwrap(), v, "{e}");
        }
        assert!(matches!(eval("s1 + 1", &dims), Err(Unbound(s)) if s == "s1"));
        assert!(eval("s0 +", &dims).is_err());
        assert!(eval("s0 // 0", &dims).is_err());
        assert!(mentions("s77 + 1", "s77") && !mentions("s770", "s77"));
        assert!(mentions("Symbol('s77', positive=True)", "s77"));
        assert_eq!(as_symbol("Symbol('s77', positive=True, integer=True)").as_deref(), Some("s77"));
        assert_eq!(as_symbol("s5").as_deref(), Some("s5"));
        assert_eq!(as_symbol("s5 + 1"), None);
    }
}
