//! Colour depth of the terminal (from NO_COLOR, COLORTERM, TERM) and downsampling of theme colours.

use ratatui::style::Color;

/// How many colours the terminal can show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorDepth {
    /// `NO_COLOR` is set or `--no-color`: every colour becomes the terminal default.
    None,
    Ansi16,
    Ansi256,
    TrueColor,
}

impl ColorDepth {
    /// Detects the depth from the environment: `NO_COLOR` (any value) wins, then `COLORTERM`
    /// (`truecolor`/`24bit`), then `TERM` (`*256color*`), else 16 colours.
    pub fn detect(no_color_flag: bool) -> ColorDepth {
        let var = |k: &str| std::env::var(k).ok();
        Self::from_env(
            no_color_flag,
            var("NO_COLOR"),
            var("COLORTERM"),
            var("TERM"),
        )
    }

    pub fn from_env(
        no_color_flag: bool,
        no_color: Option<String>,
        colorterm: Option<String>,
        term: Option<String>,
    ) -> ColorDepth {
        // no-color.org: "when present and not an empty string".
        if no_color_flag || no_color.is_some_and(|v| !v.is_empty()) {
            return ColorDepth::None;
        }
        let colorterm = colorterm.unwrap_or_default().to_ascii_lowercase();
        if colorterm.contains("truecolor") || colorterm.contains("24bit") {
            return ColorDepth::TrueColor;
        }
        let term = term.unwrap_or_default().to_ascii_lowercase();
        if term.contains("direct") || term.contains("truecolor") {
            return ColorDepth::TrueColor;
        }
        if term.contains("256") {
            return ColorDepth::Ansi256;
        }
        ColorDepth::Ansi16
    }

    /// Maps a theme colour onto what the terminal can show.
    pub fn adapt(self, color: Color) -> Color {
        match (self, color) {
            (ColorDepth::None, _) => Color::Reset,
            (ColorDepth::TrueColor, c) => c,
            (ColorDepth::Ansi256, Color::Rgb(r, g, b)) => Color::Indexed(rgb_to_256(r, g, b)),
            (ColorDepth::Ansi256, c) => c,
            (ColorDepth::Ansi16, Color::Rgb(r, g, b)) => nearest_ansi16(r, g, b),
            (ColorDepth::Ansi16, Color::Indexed(i)) => {
                let (r, g, b) = indexed_to_rgb(i);
                nearest_ansi16(r, g, b)
            }
            (ColorDepth::Ansi16, c) => c,
        }
    }
}

const CUBE_STEPS: [u8; 6] = [0, 95, 135, 175, 215, 255];

/// Nearest xterm-256 index: the 6×6×6 cube or the 24-step grey ramp, whichever is closer.
pub fn rgb_to_256(r: u8, g: u8, b: u8) -> u8 {
    let step = |v: u8| -> usize {
        CUBE_STEPS
            .iter()
            .enumerate()
            .min_by_key(|(_, s)| (i32::from(**s) - i32::from(v)).abs())
            .map(|(i, _)| i)
            .unwrap_or(0)
    };
    let (ri, gi, bi) = (step(r), step(g), step(b));
    let cube = (CUBE_STEPS[ri], CUBE_STEPS[gi], CUBE_STEPS[bi]);
    let cube_index = 16 + 36 * ri + 6 * gi + bi;
    let avg = (u32::from(r) + u32::from(g) + u32::from(b)) / 3;
    let grey_i = if avg < 8 { 0 } else { ((avg - 8) / 10).min(23) };
    let grey_v = (8 + grey_i * 10) as u8;
    let grey_index = 232 + grey_i as usize;
    if distance((r, g, b), (grey_v, grey_v, grey_v)) < distance((r, g, b), cube) {
        grey_index as u8
    } else {
        cube_index as u8
    }
}

fn distance(a: (u8, u8, u8), b: (u8, u8, u8)) -> u32 {
    let d = |x: u8, y: u8| (i32::from(x) - i32::from(y)).unsigned_abs();
    // Weighted like the eye: green matters most.
    3 * d(a.0, b.0).pow(2) + 4 * d(a.1, b.1).pow(2) + 2 * d(a.2, b.2).pow(2)
}

/// The standard VGA-ish values most terminals use for the 16 ANSI colours.
const ANSI16: [(Color, (u8, u8, u8)); 16] = [
    (Color::Black, (0, 0, 0)),
    (Color::Red, (205, 0, 0)),
    (Color::Green, (0, 205, 0)),
    (Color::Yellow, (205, 205, 0)),
    (Color::Blue, (0, 0, 238)),
    (Color::Magenta, (205, 0, 205)),
    (Color::Cyan, (0, 205, 205)),
    (Color::Gray, (229, 229, 229)),
    (Color::DarkGray, (127, 127, 127)),
    (Color::LightRed, (255, 0, 0)),
    (Color::LightGreen, (0, 255, 0)),
    (Color::LightYellow, (255, 255, 0)),
    (Color::LightBlue, (92, 92, 255)),
    (Color::LightMagenta, (255, 0, 255)),
    (Color::LightCyan, (0, 255, 255)),
    (Color::White, (255, 255, 255)),
];

/// Maps a colour to one of the 16 ANSI colours by hue, not by RGB distance: the terminal's own
/// palette differs from any fixed RGB table, and distance matching turns pastel theme colours
/// into greys. Unsaturated colours go to the grey steps by lightness; others to the hue's colour,
/// its bright variant when light.
pub fn nearest_ansi16(r: u8, g: u8, b: u8) -> Color {
    let (r, g, b) = (i32::from(r), i32::from(g), i32::from(b));
    let max = r.max(g).max(b);
    let min = r.min(g).min(b);
    let lightness = (max + min) / 2;
    if max - min < 40 {
        return match lightness {
            0..50 => Color::Black,
            50..140 => Color::DarkGray,
            140..235 => Color::Gray,
            _ => Color::White,
        };
    }
    let delta = f64::from(max - min);
    let hue = if max == r {
        60.0 * ((f64::from(g - b) / delta).rem_euclid(6.0))
    } else if max == g {
        60.0 * (f64::from(b - r) / delta + 2.0)
    } else {
        60.0 * (f64::from(r - g) / delta + 4.0)
    };
    let bright = lightness >= 127;
    let pick = |normal: Color, light: Color| if bright { light } else { normal };
    match hue as u32 {
        0..30 | 330.. => pick(Color::Red, Color::LightRed),
        30..90 => pick(Color::Yellow, Color::LightYellow),
        90..150 => pick(Color::Green, Color::LightGreen),
        150..210 => pick(Color::Cyan, Color::LightCyan),
        210..270 => pick(Color::Blue, Color::LightBlue),
        _ => pick(Color::Magenta, Color::LightMagenta),
    }
}

pub fn indexed_to_rgb(i: u8) -> (u8, u8, u8) {
    match i {
        0..=15 => ANSI16[i as usize].1,
        16..=231 => {
            let n = i - 16;
            (
                CUBE_STEPS[(n / 36) as usize],
                CUBE_STEPS[((n / 6) % 6) as usize],
                CUBE_STEPS[(n % 6) as usize],
            )
        }
        _ => {
            let v = 8 + (i - 232) * 10;
            (v, v, v)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_wins_and_empty_no_color_is_ignored() {
        let s = |v: &str| Some(v.to_string());
        assert_eq!(
            ColorDepth::from_env(false, s("1"), s("truecolor"), None),
            ColorDepth::None
        );
        assert_eq!(
            ColorDepth::from_env(false, s(""), s("truecolor"), None),
            ColorDepth::TrueColor
        );
        assert_eq!(
            ColorDepth::from_env(false, None, None, s("xterm-256color")),
            ColorDepth::Ansi256
        );
        assert_eq!(
            ColorDepth::from_env(false, None, None, s("xterm")),
            ColorDepth::Ansi16
        );
    }

    #[test]
    fn downsampling_picks_close_colours() {
        assert_eq!(rgb_to_256(255, 0, 0), 196);
        assert_eq!(rgb_to_256(128, 128, 128), 244);
        assert_eq!(nearest_ansi16(250, 10, 10), Color::LightRed);
        assert_eq!(
            nearest_ansi16(0x87, 0xd7, 0x87),
            Color::LightGreen,
            "pastels keep their hue"
        );
        assert_eq!(
            nearest_ansi16(0x1c, 0x33, 0x20),
            Color::Black,
            "dark tints are backgrounds"
        );
        assert_eq!(nearest_ansi16(0x8a, 0x8a, 0x8a), Color::DarkGray);
        assert_eq!(nearest_ansi16(0xd4, 0xd4, 0xd4), Color::Gray);
        assert_eq!(nearest_ansi16(0, 0, 0xcd), Color::Blue);
        assert_eq!(
            ColorDepth::Ansi16.adapt(Color::Indexed(196)),
            Color::LightRed
        );
        assert_eq!(ColorDepth::None.adapt(Color::Red), Color::Reset);
    }
}
