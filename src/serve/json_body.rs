//! A request body parsed as JSON with a bound on every array and on all its values, checked
//! while parsing: a body of a quarter of a million one-character messages (or of arrays nested
//! in a tool's parameters) is refused before it becomes that many objects in memory.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a body is not a JSON object this server takes.
#[derive(Debug, PartialEq)]
pub enum BodyError {
    /// An array holds more than the bound: the message says which bound.
    TooManyItems(usize),
    /// The body holds more JSON values (objects, arrays, strings, numbers…) than the bound.
    TooManyValues(usize),
    NotAnObject,
    NotJson(String),
}

/// The markers of the bounds' errors inside serde_json's message.
const TOO_MANY: &str = "array longer than the server's bound";
const TOO_MANY_VALUES: &str = "more values than the server's bound";

/// Parses `bytes` as one JSON object whose arrays (`messages`, `input`, content parts, tool
/// calls, tools) hold at most `max_items` entries each, with at most `max_values` values in
/// all (nested arrays each within the first bound still multiply).
pub fn parse_object(
    bytes: &[u8],
    max_items: usize,
    max_values: usize,
) -> Result<Map<String, Value>, BodyError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let left = std::cell::Cell::new(max_values);
    let value = Bounded {
        max_items,
        left: &left,
    }
    .deserialize(&mut de)
    .and_then(|v| de.end().map(|()| v));
    match value {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BodyError::NotAnObject),
        Err(e) if e.to_string().starts_with(TOO_MANY) => Err(BodyError::TooManyItems(max_items)),
        Err(e) if e.to_string().starts_with(TOO_MANY_VALUES) => {
            Err(BodyError::TooManyValues(max_values))
        }
        Err(e) => Err(BodyError::NotJson(e.to_string())),
    }
}

/// Builds a `Value` as serde_json's own visitor does, refusing an array past `max_items` and
/// any value past the `left` budget.
#[derive(Clone, Copy)]
struct Bounded<'a> {
    max_items: usize,
    left: &'a std::cell::Cell<usize>,
}

impl Bounded<'_> {
    /// Counts one value against the budget.
    fn take<E: de::Error>(self) -> Result<(), E> {
        match self.left.get() {
            0 => Err(E::custom(TOO_MANY_VALUES)),
            n => {
                self.left.set(n - 1);
                Ok(())
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Bounded<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.take()?;
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.take()?;
        // As serde_json: a float JSON cannot hold is null (its parser refuses `1e999` before).
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.take()?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Value, E> {
        self.take()?;
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(self)? {
            if items.len() == self.max_items {
                return Err(de::Error::custom(TOO_MANY));
            }
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.take()?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            // A key is a string held in memory like a value.
            self.take()?;
            let value = map.next_value_seed(self)?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_serde_json_parses_within_the_bound() {
        let text = r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"n":1,"t":0.5,"neg":-3,"f":1.5e300,"z":null,"b":true,"dup":1,"dup":2}"#;
        let ours = parse_object(text.as_bytes(), 4, 1000).unwrap();
        let theirs: Value = serde_json::from_str(text).unwrap();
        assert_eq!(Value::Object(ours), theirs);
    }

    #[test]
    fn an_array_past_the_bound_is_refused_while_parsing() {
        let messages: Vec<String> = (0..5)
            .map(|_| r#"{"role":"user","content":"a"}"#.to_string())
            .collect();
        let text = format!(r#"{{"messages":[{}]}}"#, messages.join(","));
        assert!(parse_object(text.as_bytes(), 5, 1000).is_ok());
        assert_eq!(
            parse_object(text.as_bytes(), 4, 1000),
            Err(BodyError::TooManyItems(4))
        );
        // Nested arrays have the same bound.
        assert_eq!(
            parse_object(br#"{"a":[[1,2,3]]}"#, 2, 1000),
            Err(BodyError::TooManyItems(2))
        );
        // Nested arrays each within the bound still meet the bound on all values (red team:
        // `[[0,…],[0,…],…]` in a tool's parameters took the server to 1.4 GB).
        let row = format!("[{}]", vec!["0"; 100].join(","));
        let nested = format!(r#"{{"tools":[{}]}}"#, vec![row.as_str(); 100].join(","));
        assert!(parse_object(nested.as_bytes(), 100, 20_000).is_ok());
        assert_eq!(
            parse_object(nested.as_bytes(), 100, 10_000),
            Err(BodyError::TooManyValues(10_000))
        );
        // Object keys count too.
        let keys: Vec<String> = (0..50).map(|i| format!(r#""k{i}":0"#)).collect();
        let wide = format!("{{{}}}", keys.join(","));
        assert_eq!(
            parse_object(wide.as_bytes(), 100, 60),
            Err(BodyError::TooManyValues(60))
        );
    }

    #[test]
    fn other_bodies_are_named_for_what_they_are() {
        assert_eq!(parse_object(b"[1]", 9, 99), Err(BodyError::NotAnObject));
        assert!(matches!(
            parse_object(b"{\"a\":", 9, 99),
            Err(BodyError::NotJson(_))
        ));
        assert!(matches!(
            parse_object(b"{} x", 9, 99),
            Err(BodyError::NotJson(_))
        ));
        assert!(matches!(
            parse_object(br#"{"big":1e999}"#, 9, 99),
            Err(BodyError::NotJson(_))
        ));
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse_object(deep.as_bytes(), 9, 10_000_000),
            Err(BodyError::NotJson(_))
        ));
    }
}
