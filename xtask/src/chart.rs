//! Line charts as SVG for the benchmarks page: one polyline per series, a legend, grid lines
//! at the decades (or at the measured x values), either axis linear or logarithmic. The output
//! depends only on the input (no clock, no randomness), so a re-run on the same figures writes
//! the same file.
//!
//! ```ignore
//! let svg = chart::render(&chart::Chart {
//!     title: "store bytes vs turns",
//!     x_label: "turns",
//!     y_label: "bytes",
//!     x_log: false,
//!     y_log: true,
//!     y_unit: chart::Unit::Bytes,
//!     series: vec![chart::Series::solid("ours", "#1f77b4", vec![(10.0, 1e4), (500.0, 6e5)])],
//! });
//! ```

use std::fmt::Write as _;

/// How a y value is written on the axis.
#[derive(Clone, Copy, Debug)]
pub enum Unit {
    /// Bytes: B, kB, MB (powers of 1000, as the tables print them).
    Bytes,
    /// Milliseconds.
    Millis,
}

impl Unit {
    fn fmt(self, v: f64) -> String {
        match self {
            Unit::Bytes if v >= 1e6 => format!("{} MB", trim(v / 1e6)),
            Unit::Bytes if v >= 1e3 => format!("{} kB", trim(v / 1e3)),
            Unit::Bytes => format!("{} B", trim(v)),
            Unit::Millis => format!("{} ms", trim(v)),
        }
    }
}

fn trim(v: f64) -> String {
    if v >= 10.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// One plotted line.
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// Stroke colour (`#rrggbb`).
    pub color: &'static str,
    /// Dashed (a peer) or solid (ours).
    pub dashed: bool,
    /// `(x, y)` points, in x order.
    pub points: Vec<(f64, f64)>,
}

impl Series {
    /// A solid line (ours).
    pub fn solid(label: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Self {
        Series {
            label: label.into(),
            color,
            dashed: false,
            points,
        }
    }

    /// A dashed line (a peer).
    pub fn dashed(label: impl Into<String>, color: &'static str, points: Vec<(f64, f64)>) -> Self {
        Series {
            dashed: true,
            ..Series::solid(label, color, points)
        }
    }
}

/// A chart to draw.
#[derive(Clone, Debug)]
pub struct Chart<'a> {
    /// Heading above the plot.
    pub title: &'a str,
    /// Caption of the x axis.
    pub x_label: &'a str,
    /// Caption of the y axis.
    pub y_label: &'a str,
    /// Logarithmic x axis (grid at the measured x values), else linear.
    pub x_log: bool,
    /// Logarithmic y axis (grid at 1-2-5 steps per decade), else linear from 0.
    pub y_log: bool,
    /// How y values are written.
    pub y_unit: Unit,
    /// The lines.
    pub series: Vec<Series>,
}

/// Palette for series, in legend order.
pub const COLORS: [&str; 14] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
];

/// The chart as a standalone SVG document.
pub fn render(c: &Chart<'_>) -> String {
    let legend_rows = c.series.len().max(1) as f64;
    let (w, l, r, t) = (1040.0, 80.0, 440.0, 36.0);
    let h = (420.0f64).max(t + 30.0 + legend_rows * 18.0 + 60.0);
    let b = 50.0;
    let xs: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| x.is_finite() && (!c.x_log || *x > 0.0))
        .collect();
    let ys: Vec<f64> = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite() && (!c.y_log || *y > 0.0))
        .collect();
    let fx = |x: f64| if c.x_log { x.log10() } else { x };
    let fy = |y: f64| if c.y_log { y.log10() } else { y };
    let (mut x0, mut x1) = min_max(xs.iter().map(|x| fx(*x)));
    if !c.x_log {
        x0 = x0.min(0.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let (y0, y1) = {
        let (lo, hi) = min_max(ys.iter().map(|y| fy(*y)));
        if c.y_log {
            (lo.floor(), hi.ceil().max(lo.floor() + 1.0))
        } else {
            (0.0, if hi > 0.0 { hi * 1.1 } else { 1.0 })
        }
    };
    let pw = w - l - r;
    let ph = h - t - b;
    let px = |x: f64| l + (fx(x) - x0) / (x1 - x0) * pw;
    let py = |y: f64| t + (y1 - fy(y)) / (y1 - y0) * ph;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        l + pw / 2.0,
        escape(c.title)
    );
    // x grid: the measured x values on a log axis, else five even steps.
    let x_ticks: Vec<f64> = if c.x_log {
        let mut v = xs.clone();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    } else {
        (0..=5)
            .map(|i| x0 + (x1 - x0) * f64::from(i) / 5.0)
            .collect()
    };
    for x in x_ticks {
        let gx = px(x);
        let _ = writeln!(
            s,
            r##"<line x1="{gx:.1}" y1="{t}" x2="{gx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            t + ph,
            t + ph + 18.0,
            trim(x)
        );
    }
    // y grid: 1-2-5 per decade on a log axis, else five even steps.
    let y_ticks: Vec<f64> = if c.y_log {
        let mut v = Vec::new();
        let mut e = y0 as i32;
        while f64::from(e) < y1 + 1e-9 {
            for m in [1.0, 2.0, 5.0] {
                let y = m * 10f64.powi(e);
                if y.log10() <= y1 + 1e-9 {
                    v.push(y);
                }
            }
            e += 1;
        }
        v
    } else {
        (0..=5).map(|i| y1 * f64::from(i) / 5.0).collect()
    };
    for y in y_ticks {
        let gy = py(y);
        let _ = writeln!(
            s,
            r##"<line x1="{l}" y1="{gy:.1}" x2="{:.1}" y2="{gy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            l + pw,
            l - 6.0,
            gy + 4.0,
            c.y_unit.fmt(y)
        );
    }
    let _ = writeln!(
        s,
        r#"<rect x="{l}" y="{t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        l + pw / 2.0,
        h - 12.0,
        escape(c.x_label)
    );
    let _ = writeln!(
        s,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        t + ph / 2.0,
        t + ph / 2.0,
        escape(c.y_label)
    );
    for (i, series) in c.series.iter().enumerate() {
        let dash = if series.dashed {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let pts: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| {
                x.is_finite() && y.is_finite() && (!c.x_log || *x > 0.0) && (!c.y_log || *y > 0.0)
            })
            .collect();
        if pts.len() > 1 {
            let line: Vec<String> = pts
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                line.join(" "),
                series.color
            );
        }
        for (x, y) in &pts {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{}"/>"#,
                px(*x),
                py(*y),
                series.color
            );
        }
        let ly = t + 10.0 + i as f64 * 18.0;
        let lx = l + pw + 14.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            series.color,
            lx + 30.0,
            ly + 4.0,
            escape(&series.label)
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Smallest and largest value; `(0, 1)` when there is none.
fn min_max(v: impl Iterator<Item = f64>) -> (f64, f64) {
    let (a, b) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    if a.is_finite() { (a, b) } else { (0.0, 1.0) }
}

fn escape(t: &str) -> String {
    t.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_and_is_deterministic() {
        let c = Chart {
            title: "bytes <vs> turns",
            x_label: "turns",
            y_label: "bytes",
            x_log: false,
            y_log: true,
            y_unit: Unit::Bytes,
            series: vec![
                Series::solid("ours", COLORS[0], vec![(10.0, 2e4), (500.0, 6e5)]),
                Series::dashed("peer", COLORS[1], vec![(10.0, 3e5), (500.0, 5.4e7)]),
                Series::solid("empty", COLORS[2], vec![]),
            ],
        };
        let a = render(&c);
        assert_eq!(a, render(&c));
        assert_eq!(a.matches("<polyline").count(), 2);
        assert!(a.contains("bytes &lt;vs&gt; turns"));
        assert!(a.contains("100 MB") || a.contains("50 MB"));
        assert!(a.contains(r#"stroke-dasharray="6 4""#));
    }

    #[test]
    fn log_x_ticks_are_the_measured_values() {
        let c = Chart {
            title: "latency",
            x_label: "connections",
            y_label: "ms",
            x_log: true,
            y_log: true,
            y_unit: Unit::Millis,
            series: vec![Series::solid(
                "p99",
                COLORS[0],
                vec![(1.0, 0.5), (16.0, 9.0), (64.0, 30.0)],
            )],
        };
        let svg = render(&c);
        for x in ["1</text>", "16</text>", "64</text>"] {
            assert!(svg.contains(x), "{x} missing");
        }
    }
}
