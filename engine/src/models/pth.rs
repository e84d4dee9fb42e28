//! `torch.save` archives (`.pth`, `.pt`, `.ckpt` in the zip format torch writes since 1.6)
//! read without running them: the archive's `data.pkl` is walked by a small pickle machine
//! that knows the handful of callables a state dict is made of (`OrderedDict`,
//! `torch._utils._rebuild_tensor_v2`, `_rebuild_parameter`) and turns every other call into
//! an opaque value, so a checkpoint can never execute code here. Each tensor's bytes are
//! the archive's `data/<key>` entry, at the tensor's storage offset.
//!
//! Only what a checkpoint of weights needs is read: nested dicts of tensors (names joined
//! with `.`), contiguous tensors of F32, F16, BF16 or F64, little-endian archives.
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One tensor of an archive, as f32 values in torch's row-major order.
#[derive(Clone, Debug, PartialEq)]
pub struct PthTensor {
    /// Torch's shape (outermost first).
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

#[derive(Debug, thiserror::Error)]
#[error("{path}: {what}")]
pub struct PthError {
    pub path: PathBuf,
    pub what: String,
}

/// Every tensor of the archive at `path`, by its dotted name (`encoder.block.0.weight_v`);
/// `keep` picks the names to read (the others are not decoded).
pub fn read_tensors(path: &Path, keep: &dyn Fn(&str) -> bool) -> Result<Vec<(String, PthTensor)>, PthError> {
    let err = |what: String| PthError { path: path.to_path_buf(), what };
    let file = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| {
        err(format!(
            "not a torch zip archive ({e}); a checkpoint saved before torch 1.6 must be re-saved with a newer torch"
        ))
    })?;
    let pkl = (0..zip.len())
        .filter_map(|i| zip.name_for_index(i).map(str::to_string))
        .find(|n| n == "data.pkl" || n.ends_with("/data.pkl"))
        .ok_or_else(|| err("the archive holds no data.pkl".into()))?;
    let root = pkl.strip_suffix("data.pkl").unwrap_or_default().to_string();
    let read_entry = |zip: &mut zip::ZipArchive<std::fs::File>, name: &str| -> Result<Vec<u8>, PthError> {
        let mut entry = zip.by_name(name).map_err(|e| err(format!("entry {name}: {e}")))?;
        let mut buf = Vec::with_capacity(entry.size() as usize);
        entry.read_to_end(&mut buf).map_err(|e| err(format!("entry {name}: {e}")))?;
        Ok(buf)
    };
    if let Ok(order) = read_entry(&mut zip, &format!("{root}byteorder")) {
        if order.trim_ascii() != b"little" {
            return Err(err(format!(
                "a {} byte-order archive; only little-endian ones are read",
                String::from_utf8_lossy(&order)
            )));
        }
    }
    let pickle = read_entry(&mut zip, &pkl)?;
    let value = Machine::default().run(&pickle).map_err(|e| err(format!("{pkl}: {e}")))?;
    let mut found = Vec::new();
    flatten(&value, "", &mut found);
    if found.is_empty() {
        return Err(err("no tensor in the archive's dicts".into()));
    }
    let mut out = Vec::new();
    let mut storages: HashMap<String, Vec<u8>> = HashMap::new();
    for (name, t) in found {
        if !keep(&name) {
            continue;
        }
        let bytes = match storages.get(&t.key) {
            Some(b) => b,
            None => {
                let b = read_entry(&mut zip, &format!("{root}data/{}", t.key))?;
                storages.entry(t.key.clone()).or_insert(b)
            }
        };
        out.push((name.clone(), t.decode(bytes).map_err(|e| err(format!("tensor {name}: {e}")))?));
    }
    Ok(out)
}

/// A tensor as the pickle describes it: its storage entry and element type, where it
/// starts in the storage (elements), its shape and strides.
#[derive(Clone, Debug, PartialEq)]
struct TensorRef {
    key: String,
    dtype: String,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl TensorRef {
    fn decode(&self, bytes: &[u8]) -> Result<PthTensor, String> {
        let n: usize = self.shape.iter().product();
        let mut want = 1;
        for (d, s) in self.shape.iter().zip(&self.stride).rev() {
            if *d > 1 && *s != want {
                return Err(format!("strides {:?} of shape {:?} are not contiguous", self.stride, self.shape));
            }
            want *= d;
        }
        let size = match self.dtype.as_str() {
            "FloatStorage" | "float32" => 4,
            "HalfStorage" | "BFloat16Storage" => 2,
            "DoubleStorage" => 8,
            other => return Err(format!("element type {other} is not read (F32, F16, BF16, F64 are)")),
        };
        let raw = bytes
            .get(self.offset * size..(self.offset + n) * size)
            .ok_or_else(|| format!("{n} elements at {} overrun the storage of {} bytes", self.offset, bytes.len()))?;
        let data = match self.dtype.as_str() {
            "HalfStorage" => raw.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            "BFloat16Storage" => {
                raw.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect()
            }
            "DoubleStorage" => {
                raw.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")) as f32).collect()
            }
            _ => raw.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
        };
        Ok(PthTensor { shape: self.shape.clone(), data })
    }
}

/// The values a state dict's pickle builds.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    /// `module.name`, as GLOBAL names it.
    Global(String, String),
    /// A persistent id (torch's storage reference), its tuple.
    Persistent(Vec<Value>),
    Tensor(TensorRef),
    /// Anything built by a callable not read here.
    Opaque,
}

fn flatten(v: &Value, prefix: &str, out: &mut Vec<(String, TensorRef)>) {
    if let Value::Dict(items) = v {
        for (k, v) in items {
            let key = match k {
                Value::Str(s) => s.clone(),
                Value::Int(i) => i.to_string(),
                _ => continue,
            };
            let name = if prefix.is_empty() { key } else { format!("{prefix}.{key}") };
            match v {
                Value::Tensor(t) => out.push((name, t.clone())),
                Value::Dict(_) => flatten(v, &name, out),
                _ => {}
            }
        }
    }
}

#[derive(Default)]
struct Machine {
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let s = self.b.get(self.at..self.at + n).ok_or("the pickle ends inside an opcode")?;
        self.at += n;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }
    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn line(&mut self) -> Result<String, String> {
        let end = self.b[self.at..].iter().position(|&c| c == b'\n').ok_or("a GLOBAL without its newline")?;
        let s = String::from_utf8_lossy(&self.b[self.at..self.at + end]).into_owned();
        self.at += end + 1;
        Ok(s)
    }
    fn text(&mut self, n: usize) -> Result<String, String> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|e| e.to_string())
    }
}

fn as_usizes(v: &Value) -> Result<Vec<usize>, String> {
    match v {
        Value::Tuple(items) | Value::List(items) => items
            .iter()
            .map(|x| {
                if let Value::Int(i) = x {
                    usize::try_from(*i).map_err(|e| e.to_string())
                } else {
                    Err(format!("{x:?} is not a size"))
                }
            })
            .collect(),
        other => Err(format!("{other:?} is not a tuple of sizes")),
    }
}

impl Machine {
    fn pop(&mut self) -> Result<Value, String> {
        self.stack.pop().ok_or_else(|| "the pickle pops an empty stack".into())
    }

    /// The values above the last MARK, which is removed.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let m = self.marks.pop().ok_or("no MARK to pop to")?;
        if m > self.stack.len() {
            return Err("a MARK above the stack".into());
        }
        Ok(self.stack.split_off(m))
    }

    fn top(&mut self) -> Result<&mut Value, String> {
        self.stack.last_mut().ok_or_else(|| "the pickle works on an empty stack".into())
    }

    fn call(&mut self, f: Value, args: Value) -> Result<Value, String> {
        let args = match args {
            Value::Tuple(a) => a,
            _ => return Ok(Value::Opaque),
        };
        let Value::Global(module, name) = f else { return Ok(Value::Opaque) };
        Ok(match (module.as_str(), name.as_str()) {
            ("collections", "OrderedDict") | ("builtins", "dict") => Value::Dict(Vec::new()),
            ("torch._utils", "_rebuild_tensor_v2" | "_rebuild_tensor") => {
                let [storage, offset, size, stride, ..] = args.as_slice() else {
                    return Err(format!("{name} with {} arguments", args.len()));
                };
                let (dtype, key) = match storage {
                    Value::Persistent(pid) => match pid.as_slice() {
                        [_, Value::Global(_, dtype), Value::Str(key), ..] => (dtype.clone(), key.clone()),
                        [_, Value::Str(dtype), Value::Str(key), ..] => (dtype.clone(), key.clone()),
                        other => return Err(format!("a storage id {other:?} not read here")),
                    },
                    other => return Err(format!("a tensor over {other:?}, not a stored storage")),
                };
                let Value::Int(offset) = offset else { return Err("a storage offset that is not an integer".into()) };
                Value::Tensor(TensorRef {
                    key,
                    dtype,
                    offset: *offset as usize,
                    shape: as_usizes(size)?,
                    stride: as_usizes(stride)?,
                })
            }
            // A Parameter is its data.
            ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state") => {
                args.into_iter().next().unwrap_or(Value::Opaque)
            }
            _ => Value::Opaque,
        })
    }

    fn run(mut self, pickle: &[u8]) -> Result<Value, String> {
        let mut r = Reader { b: pickle, at: 0 };
        loop {
            let op = r.u8()?;
            match op {
                b'.' => return self.pop(),
                0x80 => {
                    r.u8()?;
                } // PROTO
                0x95 => {
                    r.take(8)?;
                } // FRAME
                b'q' | b'r' | 0x94 | b'h' | b'j' => self.memo_op(op, &mut r)?,
                b'(' | b'}' | b']' | b')' | b't' | 0x85..=0x87 | b'l' | b'd' | b's' | b'u' | b'a' | b'e' => {
                    self.container_op(op)?
                }
                b'c' | 0x93 | b'Q' | b'R' | 0x81 | b'b' => self.object_op(op, &mut r)?,
                _ => {
                    let v = literal(op, &mut r)?;
                    self.stack.push(v)
                }
            }
        }
    }

    /// The memo: PUT (`q`, `r`), MEMOIZE, GET (`h`, `j`).
    fn memo_op(&mut self, op: u8, r: &mut Reader<'_>) -> Result<(), String> {
        match op {
            b'h' | b'j' => {
                let k = if op == b'h' { r.u8()? as u32 } else { r.u32()? };
                let v = self.memo.get(&k).cloned().ok_or_else(|| format!("memo {k} was never stored"))?;
                self.stack.push(v);
            }
            _ => {
                let k = match op {
                    b'q' => r.u8()? as u32,
                    b'r' => r.u32()?,
                    _ => self.memo.len() as u32,
                };
                let v = self.top()?.clone();
                self.memo.insert(k, v);
            }
        }
        Ok(())
    }

    /// Marks, tuples, lists and dicts: made empty, from a mark or the stack's top, or grown.
    fn container_op(&mut self, op: u8) -> Result<(), String> {
        match op {
            b'(' => self.marks.push(self.stack.len()),
            b'}' => self.stack.push(Value::Dict(Vec::new())),
            b']' => self.stack.push(Value::List(Vec::new())),
            b')' => self.stack.push(Value::Tuple(Vec::new())),
            b't' => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Tuple(items))
            }
            0x85..=0x87 => {
                let n = (op - 0x84) as usize;
                if self.stack.len() < n {
                    return Err("a TUPLE of more values than the stack has".into());
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.stack.push(Value::Tuple(items))
            }
            b'l' => {
                let items = self.pop_mark()?;
                self.stack.push(Value::List(items))
            }
            b'd' => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Dict(pairs(items)?))
            }
            b's' => {
                let (v, k) = (self.pop()?, self.pop()?);
                if let Value::Dict(d) = self.top()? {
                    d.push((k, v))
                }
            }
            b'u' => {
                let items = pairs(self.pop_mark()?)?;
                if let Value::Dict(d) = self.top()? {
                    d.extend(items)
                }
            }
            b'a' => {
                let v = self.pop()?;
                if let Value::List(l) = self.top()? {
                    l.push(v)
                }
            }
            _ => {
                let items = self.pop_mark()?;
                if let Value::List(l) = self.top()? {
                    l.extend(items)
                }
            }
        }
        Ok(())
    }

    /// Globals, persistent ids, calls and BUILD.
    fn object_op(&mut self, op: u8, r: &mut Reader<'_>) -> Result<(), String> {
        match op {
            b'c' => {
                let (module, name) = (r.line()?, r.line()?);
                self.stack.push(Value::Global(module, name));
            }
            0x93 => {
                let (name, module) = (self.pop()?, self.pop()?);
                match (module, name) {
                    (Value::Str(m), Value::Str(n)) => self.stack.push(Value::Global(m, n)),
                    _ => return Err("STACK_GLOBAL of non-strings".into()),
                }
            }
            b'Q' => match self.pop()? {
                Value::Tuple(items) => self.stack.push(Value::Persistent(items)),
                other => return Err(format!("a persistent id {other:?} that is not a tuple")),
            },
            b'R' | 0x81 => {
                let (args, f) = (self.pop()?, self.pop()?);
                let v = if op == b'R' { self.call(f, args)? } else { Value::Opaque };
                self.stack.push(v)
            }
            _ => {
                // BUILD: the state of an object; a dict keeps its items.
                self.pop()?;
            }
        }
        Ok(())
    }
}

/// A constant pushed by opcode `op`: None, a bool, an integer, a float, a string or bytes.
fn literal(op: u8, r: &mut Reader<'_>) -> Result<Value, String> {
    Ok(match op {
        b'N' => Value::None,
        0x88 => Value::Bool(true),
        0x89 => Value::Bool(false),
        b'J' => Value::Int(r.u32()? as i32 as i64),
        b'K' => Value::Int(r.u8()? as i64),
        b'M' => Value::Int(r.u16()? as i64),
        0x8a => {
            // LONG1: a little-endian two's complement integer of n bytes.
            let n = r.u8()? as usize;
            let b = r.take(n)?;
            if n > 8 {
                return Err("an integer wider than 64 bits".into());
            }
            let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) { [0xff; 8] } else { [0; 8] };
            buf[..n].copy_from_slice(b);
            Value::Int(i64::from_le_bytes(buf))
        }
        b'G' => Value::Float(f64::from_be_bytes(r.take(8)?.try_into().expect("8 bytes"))),
        b'X' => {
            let n = r.u32()? as usize;
            Value::Str(r.text(n)?)
        }
        0x8c => {
            let n = r.u8()? as usize;
            Value::Str(r.text(n)?)
        }
        b'U' | b'C' => {
            let n = r.u8()? as usize;
            Value::Bytes(r.take(n)?.to_vec())
        }
        b'T' | b'B' => {
            let n = r.u32()? as usize;
            Value::Bytes(r.take(n)?.to_vec())
        }
        other => return Err(format!("pickle opcode 0x{other:02x} at byte {} is not read here", r.at - 1)),
    })
}

fn pairs(items: Vec<Value>) -> Result<Vec<(Value, Value)>, String> {
    if !items.len().is_multiple_of(2) {
        return Err("an odd number of dict items".into());
    }
    let mut it = items.into_iter();
    let mut out = Vec::new();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        out.push((k, v));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pickle by hand: `{"a": {"w": tensor(storage "0", offset 1, shape (2, 3))}}` over a
    /// FloatStorage, through the opcodes torch's protocol-2 writer uses.
    fn state_dict_pickle() -> Vec<u8> {
        let mut p = vec![0x80, 2];
        let global = |p: &mut Vec<u8>, m: &str, n: &str| {
            p.push(b'c');
            p.extend_from_slice(format!("{m}\n{n}\n").as_bytes());
        };
        let string = |p: &mut Vec<u8>, s: &str| {
            p.push(b'X');
            p.extend_from_slice(&(s.len() as u32).to_le_bytes());
            p.extend_from_slice(s.as_bytes());
        };
        global(&mut p, "collections", "OrderedDict");
        p.extend_from_slice(b")Rq\x00(");
        string(&mut p, "a");
        p.extend_from_slice(b"}q\x01(");
        string(&mut p, "w");
        global(&mut p, "torch._utils", "_rebuild_tensor_v2");
        p.push(b'(');
        p.push(b'(');
        string(&mut p, "storage");
        global(&mut p, "torch", "FloatStorage");
        string(&mut p, "0");
        string(&mut p, "cpu");
        p.extend_from_slice(b"K\x08tQ"); // numel 8, TUPLE, BINPERSID
        p.extend_from_slice(b"K\x01K\x02K\x03\x86K\x03K\x01\x86\x89"); // offset 1, (2, 3), (3, 1), False
        global(&mut p, "collections", "OrderedDict");
        p.extend_from_slice(b")RtR"); // hooks, TUPLE, REDUCE
        p.extend_from_slice(b"uu."); // SETITEMS (inner, then outer), STOP
        p
    }

    #[test]
    fn a_state_dict_pickle_yields_its_tensor_references() {
        let v = Machine::default().run(&state_dict_pickle()).unwrap();
        let mut found = Vec::new();
        flatten(&v, "", &mut found);
        assert_eq!(found.len(), 1);
        let (name, t) = &found[0];
        assert_eq!(name, "a.w");
        assert_eq!(
            (t.key.as_str(), t.dtype.as_str(), t.offset, t.shape.clone(), t.stride.clone()),
            ("0", "FloatStorage", 1, vec![2, 3], vec![3, 1])
        );
        let bytes: Vec<u8> = (0..8).flat_map(|i| (i as f32).to_le_bytes()).collect();
        assert_eq!(t.decode(&bytes).unwrap().data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        // Past the storage's end, and a transposed view: refused.
        assert!(TensorRef { offset: 3, ..t.clone() }.decode(&bytes).is_err());
        assert!(TensorRef { stride: vec![1, 2], ..t.clone() }.decode(&bytes).is_err());
    }

    #[test]
    fn an_unknown_opcode_is_an_error_not_a_panic() {
        assert!(Machine::default().run(&[0x80, 2, b'i']).is_err());
        assert!(Machine::default().run(&[0x80, 2, b'X', 9, 0, 0, 0, b'a']).is_err());
        assert!(Machine::default().run(b".").is_err());
    }
}
