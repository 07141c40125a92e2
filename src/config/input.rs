//! A setting's value as its source gives it — text from a flag or a `BATON_*` variable, a
//! typed TOML value from a config file — and which TOML types each kind of value accepts.

/// The value a setting's parser reads.
#[derive(Debug, Clone, Copy)]
pub enum Input<'a> {
    /// A flag or a variable: text by nature, so `--temperature 0.5` is parsed from its text.
    Text(&'a str),
    /// A config file's value with its TOML type: there `0.5` is a number and `"0.5"` a string.
    Toml(&'a toml::Value),
}

impl<'a> Input<'a> {
    /// The text of a value a file writes as a TOML string (a name, a path, a URL); another
    /// type is refused, the error naming `expected`.
    pub fn text(self, expected: &str) -> Result<&'a str, String> {
        match self {
            Input::Text(text) => Ok(text),
            Input::Toml(toml::Value::String(s)) => Ok(s),
            Input::Toml(other) => Err(wrong_type(expected, other, |_| false)),
        }
    }

    /// A number: text that parses (`what` names it when it does not), or a TOML integer, or a
    /// TOML float where the setting is not a whole number.
    pub fn number<T: Number>(self, what: &str) -> Result<T, String> {
        let value = match self {
            Input::Text(text) => {
                return text
                    .trim()
                    .parse()
                    .map_err(|_| format!("'{text}' is not {what}"));
            }
            Input::Toml(value) => value,
        };
        match value {
            toml::Value::Integer(i) => {
                T::of_integer(*i).ok_or_else(|| format!("{i} is not {what}"))
            }
            other => other
                .as_float()
                .and_then(T::of_float)
                .ok_or_else(|| wrong_type(T::EXPECTED, other, |s| s.trim().parse::<T>().is_ok())),
        }
    }

    /// `true` or `false`: as text only those two words, in a file only a TOML boolean. `"yes"`
    /// or `1` read as true in one place and as a typo in another would be a surprise in a
    /// security setting.
    pub fn boolean(self) -> Result<bool, String> {
        match self {
            Input::Text(text) => match text.trim() {
                "true" => Ok(true),
                "false" => Ok(false),
                _ => Err(format!("'{text}' is not true or false")),
            },
            Input::Toml(toml::Value::Boolean(b)) => Ok(*b),
            Input::Toml(other) => Err(wrong_type("a boolean (true or false)", other, |s| {
                matches!(s.trim(), "true" | "false")
            })),
        }
    }

    /// A list's entries, trimmed, empty ones dropped: text as [`super::defs::split_list`]
    /// splits it, or a TOML array of strings, each entry whole (commas and all).
    pub fn entries(self) -> Result<Vec<String>, String> {
        let items = match self {
            Input::Text(text) => return Ok(super::defs::split_list(text)),
            Input::Toml(toml::Value::Array(items)) => items,
            Input::Toml(other) => {
                return Err(wrong_type(
                    "a list of strings ([\"…\", \"…\"])",
                    other,
                    |_| false,
                ));
            }
        };
        let mut entries = Vec::new();
        for item in items {
            let Some(entry) = item.as_str() else {
                return Err(format!(
                    "expected a list of strings, found {} in the list",
                    item.type_str()
                ));
            };
            // Every list holds folders, names or command prefixes, none of which spans lines:
            // a line break is a slip (a `"""` string left open), and a repeated flag, which
            // travels as newline-ended lines, could not give the same entry.
            if entry.contains('\n') {
                return Err(format!("list entry {entry:?} holds a line break"));
            }
            let entry = entry.trim();
            if !entry.is_empty() {
                entries.push(entry.to_string());
            }
        }
        Ok(entries)
    }
}

/// `expected …, found <TOML type>`. A string that would be right without its quotes
/// (`temperature = "0.5"`, accepted while file values went through text) says how to write it.
pub fn wrong_type(
    expected: &str,
    found: &toml::Value,
    fits_unquoted: impl Fn(&str) -> bool,
) -> String {
    let why = format!("expected {expected}, found {}", found.type_str());
    match found {
        toml::Value::String(s) if fits_unquoted(s) => {
            format!("{why} (write it without quotes: {})", s.trim())
        }
        _ => why,
    }
}

/// A number type a setting holds, and what of a TOML value it takes.
pub trait Number: std::str::FromStr + Copy {
    /// What a file must write, for the error about another type.
    const EXPECTED: &'static str;
    /// `None` when out of range.
    fn of_integer(i: i64) -> Option<Self>;
    /// `None` for a whole-number type: a float there is the wrong type, not rounded.
    fn of_float(f: f64) -> Option<Self>;
}

macro_rules! whole_number {
    ($($t:ty),*) => {$(
        impl Number for $t {
            const EXPECTED: &'static str = "a whole number";
            fn of_integer(i: i64) -> Option<Self> {
                Self::try_from(i).ok()
            }
            fn of_float(_: f64) -> Option<Self> {
                None
            }
        }
    )*};
}
whole_number!(u32, u64);

// `temperature = 1` is a number too, though TOML calls it an integer.
impl Number for f32 {
    const EXPECTED: &'static str = "a number";
    fn of_integer(i: i64) -> Option<Self> {
        Some(i as f32)
    }
    fn of_float(f: f64) -> Option<Self> {
        Some(f as f32)
    }
}

impl Number for f64 {
    const EXPECTED: &'static str = "a number";
    fn of_integer(i: i64) -> Option<Self> {
        Some(i as f64)
    }
    fn of_float(f: f64) -> Option<Self> {
        Some(f)
    }
}
