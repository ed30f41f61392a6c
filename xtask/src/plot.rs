//! Hand-written SVG plots for `results/`: a grouped horizontal bar chart on a logarithmic
//! axis ([`bars`]) and a line plot on linear axes ([`lines`]).
//!
//! Pure functions from numbers to SVG text, with no dependency: the same figures give the
//! same bytes, so two runs that agree to the instruction write the same plots. Every number
//! is written with at most one decimal, every text is XML-escaped.
//!
//! # Invariants
//!
//! - The output is a complete, well-formed SVG 1.1 document (one `<svg>` element, every
//!   element closed), viewable in a browser and renderable on GitHub.
//! - Nothing is drawn outside the `viewBox`: bars and points are clamped to the axes.

use std::fmt::Write as _;

/// Colours of the series, in order (colour-blind-safe Okabe–Ito palette).
const COLOURS: [&str; 6] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9",
];
/// Marker shapes of the series of a line plot, in order.
const MARKERS: [Marker; 3] = [Marker::Circle, Marker::Square, Marker::Diamond];
/// Width of every plot, in SVG user units (pixels).
const WIDTH: f64 = 820.0;
/// Baseline of the legend's first line.
const LEGEND_Y: f64 = 62.0;
/// Top of the plot area under a one-line legend.
const TOP: f64 = 80.0;
/// Height of a line of the legend.
const LEGEND_LINE: f64 = 18.0;
/// Font of every text.
const FONT: &str = "font-family=\"sans-serif\"";

/// One group of bars: a label and one value per series (`None`: no bar).
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// Shown left of the group.
    pub label: String,
    /// One value per series, in the order of the series names.
    pub values: Vec<Option<u64>>,
}

/// One series of a line plot.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// Shown in the legend.
    pub name: String,
    /// Points, in the order they are joined; one point is drawn as a marker alone.
    pub points: Vec<(f64, f64)>,
}

/// A marker shape.
#[derive(Clone, Copy, Debug)]
enum Marker {
    Circle,
    Square,
    Diamond,
}

/// `s` escaped for XML text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// `x` with one decimal, without a trailing `.0` (and never `-0`).
fn num(x: f64) -> String {
    let s = format!("{:.1}", x);
    let s = s.strip_suffix(".0").unwrap_or(&s).to_string();
    if s == "-0" {
        "0".to_string()
    } else {
        s
    }
}

/// The document's start: the `<svg>` element, a white background, the title and under it
/// the subtitle.
fn start(height: f64, title: &str, subtitle: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{w}\" \
         height=\"{h}\" viewBox=\"0 0 {w} {h}\">",
        w = num(WIDTH),
        h = num(height)
    );
    let _ = writeln!(out, "<title>{}</title>", escape(title));
    let _ = writeln!(
        out,
        "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>",
        num(WIDTH),
        num(height)
    );
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"22\" {FONT} font-size=\"15\" font-weight=\"bold\" \
         text-anchor=\"middle\">{}</text>",
        num(WIDTH / 2.0),
        escape(title)
    );
    text(
        &mut out,
        WIDTH / 2.0,
        40.0,
        "middle",
        " font-size=\"11\" fill=\"#555555\"",
        subtitle,
    );
    out
}

/// A text element: 12 units high unless `extra` (more attributes, each after a space)
/// sets `font-size`.
fn text(out: &mut String, x: f64, y: f64, anchor: &str, extra: &str, s: &str) {
    let size = if extra.contains("font-size=") {
        ""
    } else {
        " font-size=\"12\""
    };
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" {FONT}{size} text-anchor=\"{anchor}\"{extra}>{}</text>",
        num(x),
        num(y),
        escape(s)
    );
}

/// A line element.
fn line(out: &mut String, (x1, y1): (f64, f64), (x2, y2): (f64, f64), style: &str) {
    let _ = writeln!(
        out,
        "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" {style}/>",
        num(x1),
        num(y1),
        num(x2),
        num(y2)
    );
}

/// Where each legend entry goes when the legend starts at `x` and wraps before the right
/// edge: its x and its line (0, 1, ...).
fn legend_layout(x: f64, names: &[String]) -> Vec<(f64, usize)> {
    let mut at = x;
    let mut row = 0;
    let mut out = Vec::new();
    for name in names {
        // About 6.5 units per character of a 12-unit sans-serif font.
        let w = 16.0 + 6.5 * name.chars().count() as f64 + 20.0;
        if at > x && at + w > WIDTH - 10.0 {
            at = x;
            row += 1;
        }
        out.push((at, row));
        at += w;
    }
    out
}

/// Lines the legend of `names` takes (at least 1).
fn legend_lines(x: f64, names: &[String]) -> usize {
    legend_layout(x, names)
        .last()
        .map_or(1, |&(_, row)| row + 1)
}

/// The legend: one coloured swatch and name per series, in lines of [`LEGEND_LINE`] units
/// from (`x`, `y`).
fn legend(out: &mut String, x: f64, y: f64, names: &[String]) {
    for (i, (name, (at, row))) in names.iter().zip(legend_layout(x, names)).enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let y = y + LEGEND_LINE * row as f64;
        let _ = writeln!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{colour}\"/>",
            num(at),
            num(y - 10.0)
        );
        text(out, at + 16.0, y, "start", "", name);
    }
}

/// The decades `10^lo ..= 10^hi` that a logarithmic axis needs to show every value in
/// `values` (at least one decade wide; `(0, 1)` when there is no positive value).
pub fn decades(values: impl IntoIterator<Item = u64>) -> (i32, i32) {
    let positive: Vec<f64> = values
        .into_iter()
        .filter(|&v| v > 0)
        .map(|v| v as f64)
        .collect();
    if positive.is_empty() {
        return (0, 1);
    }
    let min = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let max = positive.iter().copied().fold(0.0, f64::max);
    let lo = min.log10().floor() as i32;
    let hi = (max.log10().ceil() as i32).max(lo + 1);
    (lo, hi)
}

/// Horizontal grouped bars on a logarithmic axis: for each group, one bar per series (the
/// figure written at its end). `unit` labels the axis.
pub fn bars(
    title: &str,
    subtitle: &str,
    unit: &str,
    series: &[String],
    groups: &[Group],
) -> String {
    const LEFT: f64 = 300.0;
    const RIGHT: f64 = 70.0;
    let top = TOP + LEGEND_LINE * (legend_lines(LEFT, series) - 1) as f64;
    const BAR: f64 = 13.0;
    const GAP: f64 = 12.0;
    let per_group = BAR * series.len().max(1) as f64 + GAP;
    let plot_h = per_group * groups.len() as f64;
    let height = top + plot_h + 50.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let (lo, hi) = decades(
        groups
            .iter()
            .flat_map(|g| g.values.iter().flatten().copied()),
    );
    let span = f64::from(hi - lo);
    // Position of a value on the axis; values below the first decade sit at its start.
    let x_of = |v: u64| {
        let v = (v.max(1) as f64)
            .log10()
            .clamp(f64::from(lo), f64::from(hi));
        LEFT + (v - f64::from(lo)) / span * plot_w
    };

    let mut out = start(height, title, subtitle);
    legend(&mut out, LEFT, LEGEND_Y, series);
    // Decade grid lines and labels.
    for d in lo..=hi {
        let x = LEFT + f64::from(d - lo) / span * plot_w;
        line(
            &mut out,
            (x, top - 4.0),
            (x, top + plot_h),
            "stroke=\"#cccccc\" stroke-width=\"1\"",
        );
        text(
            &mut out,
            x,
            top + plot_h + 16.0,
            "middle",
            "",
            &10f64.powi(d).to_string(),
        );
    }
    text(
        &mut out,
        LEFT + plot_w / 2.0,
        top + plot_h + 36.0,
        "middle",
        "",
        &format!("{unit} (logarithmic scale)"),
    );
    for (g, group) in groups.iter().enumerate() {
        let y0 = top + per_group * g as f64 + GAP / 2.0;
        text(
            &mut out,
            LEFT - 8.0,
            y0 + BAR * series.len() as f64 / 2.0 + 4.0,
            "end",
            "",
            &group.label,
        );
        for (s, value) in group.values.iter().enumerate().take(series.len()) {
            let Some(v) = *value else { continue };
            let y = y0 + BAR * s as f64;
            let w = x_of(v) - LEFT;
            let _ = writeln!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>",
                num(LEFT),
                num(y),
                num(w.max(1.0)),
                num(BAR - 2.0),
                COLOURS[s % COLOURS.len()]
            );
            text(
                &mut out,
                LEFT + w.max(1.0) + 4.0,
                y + BAR - 3.0,
                "start",
                " font-size=\"11\"",
                &v.to_string(),
            );
        }
    }
    line(
        &mut out,
        (LEFT, top - 4.0),
        (LEFT, top + plot_h),
        "stroke=\"black\" stroke-width=\"1\"",
    );
    out.push_str("</svg>\n");
    out
}

/// A step of 1, 2 or 5 times a power of ten that divides `max` into at most about `n`
/// intervals (1 when `max` is not positive).
pub fn nice_step(max: f64, n: u32) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let rough = max / f64::from(n.max(1));
    let power = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&step| step >= rough)
        .unwrap_or(10.0 * power)
}

/// A line plot on linear axes from 0: one line and marker per point of every series, a
/// legend, and the value of each point written beside it where it does not overlap an
/// earlier one.
pub fn lines(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> String {
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 40.0;
    const PLOT_H: f64 = 340.0;
    let names: Vec<String> = series.iter().map(|s| s.name.clone()).collect();
    let top = TOP + LEGEND_LINE * (legend_lines(LEFT, &names) - 1) as f64;
    let height = top + PLOT_H + 55.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let points = || series.iter().flat_map(|s| s.points.iter().copied());
    let max_x = points().map(|(x, _)| x).fold(0.0, f64::max);
    let max_y = points().map(|(_, y)| y).fold(0.0, f64::max);
    let x_step = nice_step(max_x, 8);
    let y_step = nice_step(max_y * 1.1, 6);
    let x_end = (max_x / x_step).ceil().max(1.0) * x_step;
    let y_end = (max_y * 1.1 / y_step).ceil().max(1.0) * y_step;
    let at = |(x, y): (f64, f64)| {
        (
            LEFT + x.clamp(0.0, x_end) / x_end * plot_w,
            top + PLOT_H - y.clamp(0.0, y_end) / y_end * PLOT_H,
        )
    };

    let mut out = start(height, title, subtitle);
    legend(&mut out, LEFT, LEGEND_Y, &names);
    // Grid and tick labels.
    let ticks = |end: f64, step: f64| {
        let n = (end / step).round() as u32;
        (0..=n).map(move |i| f64::from(i) * step)
    };
    for y in ticks(y_end, y_step) {
        let (_, py) = at((0.0, y));
        line(
            &mut out,
            (LEFT, py),
            (LEFT + plot_w, py),
            "stroke=\"#dddddd\" stroke-width=\"1\"",
        );
        text(&mut out, LEFT - 6.0, py + 4.0, "end", "", &num(y));
    }
    for x in ticks(x_end, x_step) {
        let (px, _) = at((x, 0.0));
        line(
            &mut out,
            (px, top + PLOT_H),
            (px, top + PLOT_H + 4.0),
            "stroke=\"black\" stroke-width=\"1\"",
        );
        text(&mut out, px, top + PLOT_H + 18.0, "middle", "", &num(x));
    }
    line(
        &mut out,
        (LEFT, top),
        (LEFT, top + PLOT_H),
        "stroke=\"black\" stroke-width=\"1\"",
    );
    line(
        &mut out,
        (LEFT, top + PLOT_H),
        (LEFT + plot_w, top + PLOT_H),
        "stroke=\"black\" stroke-width=\"1\"",
    );
    text(
        &mut out,
        LEFT + plot_w / 2.0,
        top + PLOT_H + 40.0,
        "middle",
        "",
        x_label,
    );
    let _ = writeln!(
        out,
        "<text x=\"18\" y=\"{y}\" {FONT} font-size=\"12\" text-anchor=\"middle\" \
         transform=\"rotate(-90 18 {y})\">{}</text>",
        escape(y_label),
        y = num(top + PLOT_H / 2.0)
    );
    // Boxes (left, top, right, bottom) the value labels must not cover: every marker, and
    // the labels drawn so far.
    let mut placed: Vec<[f64; 4]> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&p| at(p)))
        .map(|(x, y)| [x - 5.0, y - 5.0, x + 5.0, y + 5.0])
        .collect();
    for (i, s) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let pts: Vec<(f64, f64)> = s.points.iter().map(|&p| at(p)).collect();
        if pts.len() > 1 {
            let list: Vec<String> = pts
                .iter()
                .map(|&(x, y)| format!("{},{}", num(x), num(y)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>",
                list.join(" ")
            );
        }
        for (&(px, py), &(_, y)) in pts.iter().zip(&s.points) {
            marker(&mut out, MARKERS[i % MARKERS.len()], px, py, colour);
            let label = num(y);
            // Above right of the point, else below right, else not at all.
            let w = 6.5 * label.chars().count() as f64;
            let free = [py - 6.0, py + 15.0].into_iter().find(|&base| {
                let b = [px + 7.0, base - 10.0, px + 7.0 + w, base + 1.0];
                let clear = placed
                    .iter()
                    .all(|p: &[f64; 4]| b[2] < p[0] || p[2] < b[0] || b[3] < p[1] || p[3] < b[1]);
                if clear {
                    placed.push(b);
                }
                clear
            });
            if let Some(base) = free {
                text(
                    &mut out,
                    px + 7.0,
                    base,
                    "start",
                    &format!(" font-size=\"11\" fill=\"{colour}\""),
                    &label,
                );
            }
        }
    }
    out.push_str("</svg>\n");
    out
}

/// Draws a marker centred on (`x`, `y`).
fn marker(out: &mut String, shape: Marker, x: f64, y: f64, colour: &str) {
    let _ = match shape {
        Marker::Circle => writeln!(
            out,
            "<circle cx=\"{}\" cy=\"{}\" r=\"4\" fill=\"{colour}\"/>",
            num(x),
            num(y)
        ),
        Marker::Square => writeln!(
            out,
            "<rect x=\"{}\" y=\"{}\" width=\"8\" height=\"8\" fill=\"{colour}\"/>",
            num(x - 4.0),
            num(y - 4.0)
        ),
        Marker::Diamond => writeln!(
            out,
            "<polygon points=\"{},{} {},{} {},{} {},{}\" fill=\"{colour}\"/>",
            num(x),
            num(y - 5.0),
            num(x + 5.0),
            num(y),
            num(x),
            num(y + 5.0),
            num(x - 5.0),
            num(y)
        ),
    };
}

#[cfg(test)]
pub mod unit_tests {
    use super::*;

    /// Checks that `svg` is one well-formed `<svg>` element: every tag closed in order,
    /// attribute values quoted, no stray `<` or `&` in text. Returns the element names.
    pub fn check_well_formed(svg: &str) -> Vec<String> {
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = svg;
        while let Some(open) = rest.find('<') {
            let text = &rest[..open];
            assert!(!text.contains('>'), "stray > in {text:?}");
            for (i, _) in text.match_indices('&') {
                let entity = &text[i..];
                assert!(
                    ["&amp;", "&lt;", "&gt;", "&quot;", "&apos;"]
                        .iter()
                        .any(|e| entity.starts_with(e)),
                    "bad entity in {text:?}"
                );
            }
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            assert!(!tag.contains('<'), "< inside tag {tag:?}");
            assert_eq!(
                tag.matches('"').count() % 2,
                0,
                "unbalanced quotes: {tag:?}"
            );
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "mismatched </{name}>");
            } else {
                let name: String = tag
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric())
                    .collect();
                assert!(!name.is_empty(), "tag without a name: {tag:?}");
                if stack.is_empty() {
                    assert_eq!(name, "svg", "top element");
                    assert!(names.is_empty(), "two top elements");
                }
                if !tag.ends_with('/') {
                    stack.push(name.clone());
                }
                names.push(name);
            }
            rest = &rest[close + 1..];
        }
        assert!(rest.trim().is_empty(), "text after the document: {rest:?}");
        assert!(stack.is_empty(), "unclosed: {stack:?}");
        names
    }

    #[test]
    fn numbers_and_escapes() {
        assert_eq!(num(3.0), "3");
        assert_eq!(num(2.25), "2.2");
        assert_eq!(num(-0.01), "0");
        assert_eq!(num(1024.0), "1024");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn legend_wraps() {
        let names: Vec<String> = (0..8).map(|i| format!("series number {i}")).collect();
        let layout = legend_layout(80.0, &names);
        assert_eq!(layout[0], (80.0, 0));
        assert!(layout.iter().all(|&(x, _)| x + 100.0 < WIDTH));
        assert_eq!(legend_lines(80.0, &names), layout[7].1 + 1);
        assert!(legend_lines(80.0, &names) >= 2);
        assert_eq!(legend_lines(80.0, &[]), 1);
        let svg = lines(
            "wide",
            "",
            "x",
            "y",
            &names
                .iter()
                .map(|n| Series {
                    name: n.clone(),
                    points: vec![(1.0, 1.0)],
                })
                .collect::<Vec<_>>(),
        );
        check_well_formed(&svg);
    }

    #[test]
    fn axes() {
        assert_eq!(decades([5, 331, 66418]), (0, 5));
        assert_eq!(decades([100]), (2, 3));
        assert_eq!(decades([150, 900]), (2, 3));
        assert_eq!(decades([0]), (0, 1));
        assert_eq!(nice_step(1024.0, 8), 200.0);
        assert_eq!(nice_step(24000.0, 6), 5000.0);
        assert_eq!(nice_step(10.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
    }

    #[test]
    fn bar_chart() {
        let series = ["Baton".to_string(), "Linux".to_string()];
        let groups = [
            Group {
                label: "floor.syscall.null".into(),
                values: vec![Some(154), Some(331)],
            },
            Group {
                label: "x <& y".into(),
                values: vec![Some(4141), None],
            },
        ];
        let svg = bars("Baton & Linux", "sub", "instructions", &series, &groups);
        let names = check_well_formed(&svg);
        // Background, two swatches and three bars.
        assert_eq!(names.iter().filter(|n| *n == "rect").count(), 6);
        assert!(svg.contains(">331</text>"));
        assert!(svg.contains("x &lt;&amp; y"));
        assert!(svg.contains("Baton &amp; Linux"));
        // Decades 10^2 ..= 10^4 on the axis.
        for d in ["100", "1000", "10000"] {
            assert!(svg.contains(&format!(">{d}</text>")), "{d}");
        }
        // Same input, same bytes.
        assert_eq!(
            svg,
            bars("Baton & Linux", "sub", "instructions", &series, &groups)
        );
        // Nothing to draw is still a document.
        check_well_formed(&bars("empty", "", "instructions", &series, &[]));
    }

    #[test]
    fn line_plot() {
        let series = [
            Series {
                name: "fast".into(),
                points: vec![(0.0, 4141.0), (32.0, 4153.0), (1024.0, 4525.0)],
            },
            Series {
                name: "Linux".into(),
                points: vec![(64.0, 21754.0)],
            },
        ];
        let svg = lines("RPC", "sub", "bytes", "instructions", &series);
        let names = check_well_formed(&svg);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 1);
        assert_eq!(names.iter().filter(|n| *n == "circle").count(), 3);
        // The single Linux point is a square marker, with its value.
        assert!(svg.contains(">21754</text>"));
        // Every coordinate is inside the view box.
        for attr in [" x=\"", " cx=\"", " x1=\"", " x2=\""] {
            for (i, _) in svg.match_indices(attr) {
                let v: String = svg[i + attr.len()..]
                    .chars()
                    .take_while(|c| *c != '"')
                    .collect();
                let v: f64 = v.parse().unwrap_or_else(|_| panic!("{attr}{v}"));
                assert!((0.0..=WIDTH).contains(&v), "{attr}{v}");
            }
        }
        check_well_formed(&lines("empty", "", "x", "y", &[]));
    }
}
