//! JSON text exactly as Python's `json.dumps` writes it, for chat templates' `tojson` filter.
//!
//! HF renders templates with Python Jinja and a `tojson` that calls
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`: `", "` and
//! `": "` separators, keys in insertion order, floats as Python's `repr`. A prompt that differs
//! by one space is a different token sequence, so this must match byte for byte.

use minijinja::value::{Value, ValueKind};

/// How to write the JSON (the keyword arguments of Python's `json.dumps` that HF exposes).
#[derive(Debug, Clone, Default)]
pub struct PyJsonStyle {
    /// Pretty-print with this many spaces per level (`indent=N`).
    pub indent: Option<usize>,
    /// Escape every non-ASCII character as `\uXXXX`.
    pub ensure_ascii: bool,
    pub sort_keys: bool,
    /// `(item_separator, key_separator)`; `None` = Python's default for the indent.
    pub separators: Option<(String, String)>,
}

/// Writes `value` as Python's `json.dumps` would.
pub fn dumps(value: &Value, style: &PyJsonStyle) -> Result<String, minijinja::Error> {
    let (item_sep, key_sep) = match &style.separators {
        Some((item, key)) => (item.clone(), key.clone()),
        None if style.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut writer = Writer {
        out: String::new(),
        style,
        item_sep,
        key_sep,
    };
    writer.value(value, 0)?;
    Ok(writer.out)
}

struct Writer<'s> {
    out: String,
    style: &'s PyJsonStyle,
    item_sep: String,
    key_sep: String,
}

impl Writer<'_> {
    fn value(&mut self, value: &Value, depth: usize) -> Result<(), minijinja::Error> {
        match value.kind() {
            ValueKind::Undefined | ValueKind::None => self.out.push_str("null"),
            ValueKind::Bool => self
                .out
                .push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => self.number(value),
            ValueKind::String => self.string(value.as_str().unwrap_or_default()),
            ValueKind::Bytes => {
                let text = String::from_utf8_lossy(value.as_bytes().unwrap_or_default());
                self.string(&text)
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.sequence(&items, depth)?;
            }
            ValueKind::Map => self.map(value, depth)?,
            _ => self.string(&value.to_string()),
        }
        Ok(())
    }

    fn number(&mut self, value: &Value) {
        if value.is_integer() {
            // Integers of any width print the same in Python and here.
            self.out.push_str(&value.to_string());
        } else {
            match f64::try_from(value.clone()) {
                Ok(f) => self.out.push_str(&python_float_repr(f)),
                Err(_) => self.out.push_str(&value.to_string()),
            }
        }
    }

    fn string(&mut self, text: &str) {
        self.out.push('"');
        for c in text.chars() {
            match c {
                '"' => self.out.push_str("\\\""),
                '\\' => self.out.push_str("\\\\"),
                '\n' => self.out.push_str("\\n"),
                '\r' => self.out.push_str("\\r"),
                '\t' => self.out.push_str("\\t"),
                '\u{08}' => self.out.push_str("\\b"),
                '\u{0c}' => self.out.push_str("\\f"),
                c if (c as u32) < 0x20 => self.out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.style.ensure_ascii && !c.is_ascii() => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        self.out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    fn newline(&mut self, depth: usize) {
        if let Some(indent) = self.style.indent {
            self.out.push('\n');
            self.out.push_str(&" ".repeat(indent * depth));
        }
    }

    fn sequence(&mut self, items: &[Value], depth: usize) -> Result<(), minijinja::Error> {
        if items.is_empty() {
            self.out.push_str("[]");
            return Ok(());
        }
        self.out.push('[');
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(depth + 1);
            self.value(item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push(']');
        Ok(())
    }

    fn map(&mut self, value: &Value, depth: usize) -> Result<(), minijinja::Error> {
        let mut keys: Vec<Value> = value.try_iter()?.collect();
        if keys.is_empty() {
            self.out.push_str("{}");
            return Ok(());
        }
        if self.style.sort_keys {
            keys.sort_by_key(key_text);
        }
        self.out.push('{');
        for (i, key) in keys.iter().enumerate() {
            if i > 0 {
                let sep = self.item_sep.clone();
                self.out.push_str(&sep);
            }
            self.newline(depth + 1);
            self.string(&key_text(key));
            let sep = self.key_sep.clone();
            self.out.push_str(&sep);
            let item = value.get_item(key)?;
            self.value(&item, depth + 1)?;
        }
        self.newline(depth);
        self.out.push('}');
        Ok(())
    }
}

/// A dict key as Python's json module writes it (keys that are not strings are converted).
fn key_text(key: &Value) -> String {
    match key.kind() {
        ValueKind::String => key.as_str().unwrap_or_default().to_string(),
        ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).to_string(),
        ValueKind::None | ValueKind::Undefined => "null".to_string(),
        ValueKind::Number if !key.is_integer() => match f64::try_from(key.clone()) {
            Ok(f) => python_float_repr(f),
            Err(_) => key.to_string(),
        },
        _ => key.to_string(),
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, positional for exponents in
/// `-4..16`, else `d.ddde±XX`; integral values keep a `.0`.
pub fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_string();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0" } else { "0.0" }.to_string();
    }
    // Rust's `{:e}` gives the shortest round-trip digits: "1.2345e-7", "-5e20".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        let body = if point <= 0 {
            format!("0.{}{}", "0".repeat((-point) as usize), digits)
        } else if point as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(point as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..point as usize],
                &digits[point as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let mantissa = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let exp_sign = if exp < 0 { '-' } else { '+' };
        format!("{sign}{mantissa}e{exp_sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn py(v: serde_json::Value) -> String {
        dumps(&Value::from_serialize(&v), &PyJsonStyle::default()).unwrap()
    }

    #[test]
    fn float_repr_matches_python() {
        assert_eq!(python_float_repr(1.0), "1.0");
        assert_eq!(python_float_repr(0.5), "0.5");
        assert_eq!(python_float_repr(1e-6), "1e-06");
        assert_eq!(python_float_repr(0.0001), "0.0001");
        assert_eq!(python_float_repr(1e16), "1e+16");
        assert_eq!(python_float_repr(123456789012345.0), "123456789012345.0");
        assert_eq!(python_float_repr(-2.5e-7), "-2.5e-07");
        assert_eq!(python_float_repr(0.1), "0.1");
        assert_eq!(python_float_repr(1.5e300), "1.5e+300");
    }

    #[test]
    fn default_spacing_and_order() {
        let v = serde_json::json!({"b": 1, "a": [1, 2.0, "x\"y\n"], "c": {}, "d": [], "e": null, "f": true});
        assert_eq!(
            py(v),
            r#"{"b": 1, "a": [1, 2.0, "x\"y\n"], "c": {}, "d": [], "e": null, "f": true}"#
        );
    }

    #[test]
    fn indent_and_non_ascii() {
        let v = serde_json::json!({"k": ["é", 1]});
        let style = PyJsonStyle {
            indent: Some(2),
            ..Default::default()
        };
        assert_eq!(
            dumps(&Value::from_serialize(&v), &style).unwrap(),
            "{\n  \"k\": [\n    \"é\",\n    1\n  ]\n}"
        );
        let ascii = PyJsonStyle {
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(
            dumps(&Value::from_serialize(serde_json::json!("é🚀")), &ascii).unwrap(),
            "\"\\u00e9\\ud83d\\ude80\""
        );
    }
}
