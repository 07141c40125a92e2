//! Colour themes: built-in TOML files embedded with `include_str!`, user themes read at runtime
//! from `<config dir>/themes/NAME.toml` (or a path), every colour of the UI in one palette.

use std::path::{Path, PathBuf};

use ratatui::style::Color;

use super::color_depth::ColorDepth;

macro_rules! palette {
    ($($key:ident),* $(,)?) => {
        /// Every colour the UI draws with. A theme file sets them under `[colors]`.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Palette { $(pub $key: Color,)* }

        impl Palette {
            /// Every key a theme file may set, in file order.
            pub const KEYS: &'static [&'static str] = &[$(stringify!($key)),*];

            fn blank() -> Palette { Palette { $($key: Color::Reset,)* } }

            fn set(&mut self, key: &str, color: Color) -> bool {
                match key {
                    $(stringify!($key) => { self.$key = color; true })*
                    _ => false,
                }
            }

            pub fn get(&self, key: &str) -> Option<Color> {
                match key {
                    $(stringify!($key) => Some(self.$key),)*
                    _ => None,
                }
            }

            fn adapted(&self, depth: ColorDepth) -> Palette {
                Palette { $($key: depth.adapt(self.$key),)* }
            }
        }
    };
}

palette! {
    fg, bg, dim, accent, border,
    user_fg, user_bg, user_marker,
    assistant_marker, reasoning,
    heading, link, inline_code, code_label, quote, list_marker, table_border, rule,
    tool_command, tool_running, tool_ok, tool_error, tool_output,
    diff_add, diff_add_bg, diff_del, diff_del_bg, diff_hunk, diff_line_no, diff_file,
    plan_done, plan_active, plan_pending,
    error, warning, info,
    status_fg, status_bg, status_phase, spinner,
    expert_l0, expert_l1, expert_l2, expert_l3,
    search_fg, search_bg,
    modal_border, modal_title, modal_key,
    popup_fg, popup_bg, popup_selected_fg, popup_selected_bg, popup_description,
    composer_prompt, composer_placeholder, queued,
    syntax_keyword, syntax_string, syntax_comment, syntax_function, syntax_type,
    syntax_number, syntax_constant, syntax_variable, syntax_operator, syntax_attribute,
}

/// The themes shipped in the binary: (name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    ("dark", include_str!("../../themes/dark.toml")),
    ("light", include_str!("../../themes/light.toml")),
    (
        "high-contrast",
        include_str!("../../themes/high-contrast.toml"),
    ),
];

/// A loaded theme, already adapted to the terminal's colour depth.
#[derive(Debug, Clone, PartialEq)]
pub struct Theme {
    pub name: String,
    pub colors: Palette,
    /// Colours are off (`NO_COLOR`): selection and highlights use reverse video instead.
    pub no_color: bool,
    /// The depth the palette was adapted to; colours from elsewhere (a command's own SGR
    /// output) are adapted with it too.
    pub depth: ColorDepth,
}

#[derive(Debug, thiserror::Error)]
pub enum ThemeError {
    #[error("theme '{0}' not found: not built in (dark, light, high-contrast) and no file {1}")]
    NotFound(String, PathBuf),
    #[error("{path}: cannot read theme file: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: invalid TOML: {message}")]
    Toml { path: String, message: String },
    #[error("{path}: key '{key}': {message}")]
    Key {
        path: String,
        key: String,
        message: String,
    },
}

impl Theme {
    /// The default theme (dark) at the given depth.
    pub fn default_for(depth: ColorDepth) -> Theme {
        Theme::builtin("dark", depth).unwrap_or_else(|_| Theme {
            name: "dark".into(),
            colors: Palette::blank(),
            no_color: true,
            depth: ColorDepth::None,
        })
    }

    pub fn builtin(name: &str, depth: ColorDepth) -> Result<Theme, ThemeError> {
        let text = BUILTIN
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, t)| *t)
            .ok_or_else(|| ThemeError::NotFound(name.into(), PathBuf::from("(built-in)")))?;
        parse_theme(name, text, &format!("themes/{name}.toml"), depth)
    }

    /// Finds a theme by name: a path to a `.toml` file, a user theme
    /// `<config_dir>/themes/NAME.toml` (wins over a built-in of the same name), or a built-in.
    pub fn load(
        name: &str,
        config_dir: Option<&Path>,
        depth: ColorDepth,
    ) -> Result<Theme, ThemeError> {
        let as_path = Path::new(name);
        if name.ends_with(".toml") || name.contains('/') {
            return load_file(as_path, depth);
        }
        if let Some(dir) = config_dir {
            let user = dir.join("themes").join(format!("{name}.toml"));
            if user.is_file() {
                return load_file(&user, depth);
            }
        }
        match Theme::builtin(name, depth) {
            Ok(t) => Ok(t),
            Err(_) => Err(ThemeError::NotFound(
                name.into(),
                config_dir
                    .map(|d| d.join("themes").join(format!("{name}.toml")))
                    .unwrap_or_else(|| PathBuf::from(format!("themes/{name}.toml"))),
            )),
        }
    }
}

/// Names of every theme available: built-ins, then user files in `<config_dir>/themes`.
pub fn available_themes(config_dir: Option<&Path>) -> Vec<String> {
    let mut names: Vec<String> = BUILTIN.iter().map(|(n, _)| n.to_string()).collect();
    if let Some(dir) = config_dir
        && let Ok(entries) = std::fs::read_dir(dir.join("themes"))
    {
        let mut user: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let p = e.path();
                (p.extension()? == "toml").then(|| p.file_stem()?.to_str().map(str::to_string))?
            })
            .filter(|n| !names.contains(n))
            .collect();
        user.sort();
        names.extend(user);
    }
    names
}

fn load_file(path: &Path, depth: ColorDepth) -> Result<Theme, ThemeError> {
    let text = std::fs::read_to_string(path).map_err(|source| ThemeError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let name = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("custom")
        .to_string();
    parse_theme(&name, &text, &path.display().to_string(), depth)
}

/// Parses a theme file. `extends = "light"` picks the base (default `dark`); `[colors]` overrides
/// keys of the base, so a user theme may set only the colours it changes.
pub fn parse_theme(
    name: &str,
    text: &str,
    path: &str,
    depth: ColorDepth,
) -> Result<Theme, ThemeError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ThemeError::Toml {
            path: path.into(),
            message: e.to_string(),
        })?;
    let key_err = |key: &str, message: String| ThemeError::Key {
        path: path.into(),
        key: key.into(),
        message,
    };
    let extends = match table.get("extends") {
        None => None,
        Some(toml::Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(key_err("extends", "must be a theme name string".into())),
    };
    let mut colors = match extends.as_deref() {
        Some(base) if base != name => raw_builtin(base).ok_or_else(|| {
            key_err(
                "extends",
                format!("'{base}' is not a built-in theme (dark, light, high-contrast)"),
            )
        })?,
        _ if BUILTIN.iter().any(|(n, _)| *n == name) && extends.is_none() => Palette::blank(),
        _ => raw_builtin("dark").unwrap_or_else(Palette::blank),
    };
    let Some(toml::Value::Table(color_table)) = table.get("colors") else {
        return Err(key_err("colors", "missing [colors] table".into()));
    };
    for (key, value) in color_table {
        let toml::Value::String(spec) = value else {
            return Err(key_err(key, "must be a string like \"#rrggbb\"".into()));
        };
        let color = parse_color(spec).map_err(|m| key_err(key, m))?;
        if !colors.set(key, color) {
            return Err(key_err(
                key,
                "unknown colour key (see docs/tui.md for the list)".into(),
            ));
        }
    }
    Ok(Theme {
        name: name.to_string(),
        colors: colors.adapted(depth),
        no_color: depth == ColorDepth::None,
        depth,
    })
}

/// A built-in palette before depth adaptation (the base of `extends`).
fn raw_builtin(name: &str) -> Option<Palette> {
    let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
    let theme = parse_theme(name, text, name, ColorDepth::TrueColor).ok()?;
    Some(theme.colors)
}

/// `#rrggbb`, `reset`/`default`, an ANSI name (`red`, `lightblue`, `darkgray`…) or an index `0`–`255`.
pub fn parse_color(spec: &str) -> Result<Color, String> {
    let s = spec.trim().to_ascii_lowercase();
    if let Some(hex) = s.strip_prefix('#') {
        if hex.len() != 6 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!("'{spec}' is not a #rrggbb colour"));
        }
        let byte = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
        return Ok(Color::Rgb(byte(0), byte(2), byte(4)));
    }
    if let Ok(i) = s.parse::<u8>() {
        return Ok(Color::Indexed(i));
    }
    let named = match s.replace(['_', '-', ' '], "").as_str() {
        "reset" | "default" | "none" => Color::Reset,
        "black" => Color::Black,
        "red" => Color::Red,
        "green" => Color::Green,
        "yellow" => Color::Yellow,
        "blue" => Color::Blue,
        "magenta" => Color::Magenta,
        "cyan" => Color::Cyan,
        "gray" | "grey" => Color::Gray,
        "darkgray" | "darkgrey" => Color::DarkGray,
        "lightred" => Color::LightRed,
        "lightgreen" => Color::LightGreen,
        "lightyellow" => Color::LightYellow,
        "lightblue" => Color::LightBlue,
        "lightmagenta" => Color::LightMagenta,
        "lightcyan" => Color::LightCyan,
        "white" => Color::White,
        _ => {
            return Err(format!(
                "'{spec}' is not a colour (#rrggbb, a name like 'lightblue', or 0-255)"
            ));
        }
    };
    Ok(named)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_themes_set_every_key() {
        for (name, text) in BUILTIN {
            let table: toml::Table = text.parse().expect("built-in theme is TOML");
            let colors = table["colors"].as_table().expect("colors table");
            for key in Palette::KEYS {
                assert!(colors.contains_key(*key), "theme {name} lacks key {key}");
            }
            Theme::builtin(name, ColorDepth::TrueColor).expect("parses");
        }
    }

    #[test]
    fn user_theme_overrides_and_names_bad_keys() {
        let t = parse_theme(
            "mine",
            "extends = \"light\"\n[colors]\naccent = \"#010203\"\n",
            "mine.toml",
            ColorDepth::TrueColor,
        )
        .expect("parses");
        assert_eq!(t.colors.accent, Color::Rgb(1, 2, 3));
        let light = Theme::builtin("light", ColorDepth::TrueColor).expect("light");
        assert_eq!(t.colors.fg, light.colors.fg);
        let err = parse_theme(
            "bad",
            "[colors]\nnope = \"red\"\n",
            "bad.toml",
            ColorDepth::TrueColor,
        )
        .expect_err("unknown key");
        assert!(err.to_string().contains("bad.toml: key 'nope'"), "{err}");
        let err = parse_theme(
            "bad",
            "[colors]\nfg = \"#12\"\n",
            "bad.toml",
            ColorDepth::TrueColor,
        )
        .expect_err("bad colour");
        assert!(err.to_string().contains("key 'fg'"), "{err}");
    }

    #[test]
    fn user_theme_file_in_config_dir_is_found() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(dir.path().join("themes")).expect("mkdir");
        std::fs::write(
            dir.path().join("themes/ocean.toml"),
            "[colors]\nbg = \"#001122\"\n",
        )
        .expect("write");
        let t = Theme::load("ocean", Some(dir.path()), ColorDepth::TrueColor).expect("loads");
        assert_eq!(t.colors.bg, Color::Rgb(0, 0x11, 0x22));
        assert!(available_themes(Some(dir.path())).contains(&"ocean".to_string()));
        assert!(Theme::load("nope", Some(dir.path()), ColorDepth::TrueColor).is_err());
    }
}
