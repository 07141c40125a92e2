//! A request body parsed as JSON with a bound on every array, checked while parsing: a body of
//! a quarter of a million one-character messages is refused before it becomes a quarter of a
//! million objects in memory.

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why a body is not a JSON object this server takes.
#[derive(Debug, PartialEq)]
pub enum BodyError {
    /// An array holds more than the bound: the message says which bound.
    TooManyItems(usize),
    NotAnObject,
    NotJson(String),
}

/// The marker of the bound's error inside serde_json's message.
const TOO_MANY: &str = "array longer than the server's bound";

/// Parses `bytes` as one JSON object whose arrays (`messages`, `input`, content parts, tool
/// calls, tools) hold at most `max_items` entries each.
pub fn parse_object(bytes: &[u8], max_items: usize) -> Result<Map<String, Value>, BodyError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = Bounded { max_items }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    match value {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(BodyError::NotAnObject),
        Err(e) if e.to_string().starts_with(TOO_MANY) => Err(BodyError::TooManyItems(max_items)),
        Err(e) => Err(BodyError::NotJson(e.to_string())),
    }
}

/// Builds a `Value` as serde_json's own visitor does, refusing an array past `max_items`.
#[derive(Clone, Copy)]
struct Bounded {
    max_items: usize,
}

impl<'de> DeserializeSeed<'de> for Bounded {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Bounded {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // As serde_json: a float JSON cannot hold is null (its parser refuses `1e999` before).
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        self.deserialize(d)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
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
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
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
        let ours = parse_object(text.as_bytes(), 4).unwrap();
        let theirs: Value = serde_json::from_str(text).unwrap();
        assert_eq!(Value::Object(ours), theirs);
    }

    #[test]
    fn an_array_past_the_bound_is_refused_while_parsing() {
        let messages: Vec<String> = (0..5)
            .map(|_| r#"{"role":"user","content":"a"}"#.to_string())
            .collect();
        let text = format!(r#"{{"messages":[{}]}}"#, messages.join(","));
        assert!(parse_object(text.as_bytes(), 5).is_ok());
        assert_eq!(
            parse_object(text.as_bytes(), 4),
            Err(BodyError::TooManyItems(4))
        );
        // Nested arrays have the same bound.
        assert_eq!(
            parse_object(br#"{"a":[[1,2,3]]}"#, 2),
            Err(BodyError::TooManyItems(2))
        );
    }

    #[test]
    fn other_bodies_are_named_for_what_they_are() {
        assert_eq!(parse_object(b"[1]", 9), Err(BodyError::NotAnObject));
        assert!(matches!(
            parse_object(b"{\"a\":", 9),
            Err(BodyError::NotJson(_))
        ));
        assert!(matches!(
            parse_object(b"{} x", 9),
            Err(BodyError::NotJson(_))
        ));
        assert!(matches!(
            parse_object(br#"{"big":1e999}"#, 9),
            Err(BodyError::NotJson(_))
        ));
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse_object(deep.as_bytes(), 9),
            Err(BodyError::NotJson(_))
        ));
    }
}
