//! A small MessagePack decoder (enough for the AMDGPU metadata note) into `serde_json::Value`.

use serde_json::{Map, Number, Value};

/// Decodes one MessagePack value from the start of `data`.
pub(crate) fn decode(data: &[u8]) -> Result<Value, String> {
    let mut r = Reader { data, pos: 0 };
    r.value(0)
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        let end = end.ok_or_else(|| format!("msgpack: truncated at byte {}", self.pos))?;
        let s = &self.data[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, String> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | b as u64))
    }

    fn str(&mut self, n: usize) -> Result<Value, String> {
        let s = self.take(n)?;
        Ok(Value::String(String::from_utf8_lossy(s).into_owned()))
    }

    fn array(&mut self, n: usize, depth: u32) -> Result<Value, String> {
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(v))
    }

    fn map(&mut self, n: usize, depth: u32) -> Result<Value, String> {
        let mut m = Map::new();
        for _ in 0..n {
            let k = match self.value(depth + 1)? {
                Value::String(s) => s,
                other => other.to_string(),
            };
            let v = self.value(depth + 1)?;
            m.insert(k, v);
        }
        Ok(Value::Object(m))
    }

    fn value(&mut self, depth: u32) -> Result<Value, String> {
        if depth > 64 {
            return Err("msgpack: nested too deeply".into());
        }
        let tag = self.take(1)?[0];
        Ok(match tag {
            0x00..=0x7f => Value::from(tag as u64),
            0x80..=0x8f => return self.map((tag & 0x0f) as usize, depth),
            0x90..=0x9f => return self.array((tag & 0x0f) as usize, depth),
            0xa0..=0xbf => return self.str((tag & 0x1f) as usize),
            0xc0 => Value::Null,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (tag - 0xc4))? as usize;
                Value::Array(self.take(n)?.iter().map(|&b| Value::from(b)).collect())
            }
            0xca => Value::from(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Number::from_f64(f64::from_bits(self.uint(8)?))
                .map(Value::Number)
                .unwrap_or(Value::Null),
            0xcc..=0xcf => Value::from(self.uint(1 << (tag - 0xcc))?),
            0xd0..=0xd3 => {
                let n = 1usize << (tag - 0xd0);
                let raw = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                Value::from(((raw << shift) as i64) >> shift)
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (tag - 0xd9))? as usize;
                return self.str(n);
            }
            0xdc | 0xdd => {
                let n = self.uint(if tag == 0xdc { 2 } else { 4 })? as usize;
                return self.array(n, depth);
            }
            0xde | 0xdf => {
                let n = self.uint(if tag == 0xde { 2 } else { 4 })? as usize;
                return self.map(n, depth);
            }
            0xe0..=0xff => Value::from(tag as i8 as i64),
            other => {
                return Err(format!(
                    "msgpack: unsupported tag 0x{other:02x} at byte {}",
                    self.pos - 1
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_nested_maps_arrays_and_numbers() {
        // {"a": [1, -2, "xy"], "b": true, "c": 300}
        let bytes = [
            0x83, 0xa1, b'a', 0x93, 0x01, 0xfe, 0xa2, b'x', b'y', 0xa1, b'b', 0xc3, 0xa1, b'c',
            0xcd, 0x01, 0x2c,
        ];
        let v = decode(&bytes).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"a": [1, -2, "xy"], "b": true, "c": 300})
        );
    }

    #[test]
    fn truncated_input_is_an_error() {
        assert!(decode(&[0x92, 0x01]).is_err());
    }
}
