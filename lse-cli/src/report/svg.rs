//! Inline SVG charts for `lse report`: a line chart, grouped bars around zero and a
//! histogram, with axes and ticks. Every mark carries its exact value in `data-` attributes
//! (the shortest decimal that reads back as the same f64) and a `<title>` tooltip.

use std::fmt::Write as _;

/// Series colours, in run order (the first run is the reference).
pub const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

const WIDTH: f64 = 880.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 76.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 52.0;

/// HTML/XML text with `&`, `<`, `>`, `"` and `'` escaped.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// One named series of (x, y) points.
pub struct Series {
    /// Legend name (escaped when drawn).
    pub name: String,
    /// Stroke and fill colour.
    pub color: &'static str,
    /// The points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Indices of points that start a new line, not joined to the point before (line
    /// charts only).
    pub gaps: Vec<usize>,
}

/// One histogram bin.
pub struct Bin {
    /// Axis label under the bin (may be empty).
    pub label: String,
    /// Lower edge (data units).
    pub lo: f64,
    /// Upper edge (data units).
    pub hi: f64,
    /// Values in the bin.
    pub count: u64,
}

/// A linear map from data [lo, hi] onto pixels [from, to].
struct Axis {
    lo: f64,
    hi: f64,
    step: f64,
    from: f64,
    to: f64,
}

impl Axis {
    /// An axis over the values' range widened to nice tick steps; a flat range is widened.
    fn fit(values: impl Iterator<Item = f64>, from: f64, to: f64, include_zero: bool) -> Axis {
        let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        if include_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if !lo.is_finite() || !hi.is_finite() {
            (lo, hi) = (0.0, 1.0);
        }
        if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
            let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.05 };
            (lo, hi) = (lo - pad, hi + pad);
        }
        let step = nice_step(hi - lo);
        Axis {
            lo: (lo / step).floor() * step,
            hi: (hi / step).ceil() * step,
            step,
            from,
            to,
        }
    }

    fn map(&self, v: f64) -> f64 {
        self.from + (v - self.lo) / (self.hi - self.lo) * (self.to - self.from)
    }

    /// Every multiple of the step from `lo` to `hi`.
    fn ticks(&self) -> Vec<f64> {
        let n = ((self.hi - self.lo) / self.step).round() as i64;
        let first = (self.lo / self.step).round() as i64;
        (0..=n).map(|i| (first + i) as f64 * self.step).collect()
    }
}

/// A 1, 2 or 5 times a power of ten step giving about five ticks over `span`.
fn nice_step(span: f64) -> f64 {
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

/// A tick label with at most four significant digits.
pub fn short(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if (1e-3..1e5).contains(&a) {
        let decimals = (3 - a.log10().floor() as i32).max(0) as usize;
        let s = format!("{v:.decimals$}");
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    } else {
        let s = format!("{v:.2e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        format!("{mantissa}e{exp}")
    }
}

fn open(id: &str, title: &str) -> String {
    format!(
        "<svg class=\"chart\" id=\"{id}\" role=\"img\" aria-label=\"{}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\">\n",
        esc(title)
    )
}

/// Axes, grid lines, tick labels and axis titles.
fn frame(s: &mut String, x: Option<&Axis>, y: &Axis, x_label: &str, y_label: &str) {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, HEIGHT - BOTTOM, TOP);
    for t in y.ticks() {
        let py = y.map(t);
        let _ = writeln!(
            s,
            "<line class=\"grid\" x1=\"{x0}\" x2=\"{x1}\" y1=\"{py:.1}\" y2=\"{py:.1}\"/><text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            x0 - 6.0,
            py + 4.0,
            short(t)
        );
    }
    if let Some(x) = x {
        for t in x.ticks() {
            let px = x.map(t);
            let _ = writeln!(
                s,
                "<line class=\"axis\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{y0}\" y2=\"{:.1}\"/><text class=\"tick\" x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                y0 + 5.0,
                y0 + 18.0,
                short(t)
            );
        }
    }
    let _ = writeln!(
        s,
        "<line class=\"axis\" x1=\"{x0}\" x2=\"{x1}\" y1=\"{y0}\" y2=\"{y0}\"/><line class=\"axis\" x1=\"{x0}\" x2=\"{x0}\" y1=\"{y0}\" y2=\"{y1}\"/>"
    );
    let _ = writeln!(
        s,
        "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        (x0 + x1) / 2.0,
        HEIGHT - 10.0,
        esc(x_label)
    );
    let _ = writeln!(
        s,
        "<text class=\"label\" transform=\"translate(16 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        (y0 + y1) / 2.0,
        esc(y_label)
    );
}

/// Pixels per legend line.
const LEGEND_LINE: f64 = 15.0;

/// The top of the plot area below a legend of `series` lines.
fn plot_top(series: &[Series]) -> f64 {
    TOP + LEGEND_LINE * series.len() as f64 + 8.0
}

/// One legend line per series, stacked at the top left of the plot.
fn legend(s: &mut String, series: &[Series]) {
    let x = LEFT + 12.0;
    for (i, ser) in series.iter().enumerate() {
        let y = TOP + LEGEND_LINE * i as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text class=\"legend\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            y + 2.0,
            ser.color,
            x + 14.0,
            y + 11.0,
            esc(&ser.name)
        );
    }
}

/// Lines through each series' points, with a marker per point carrying `data-series`,
/// `data-x` and `data-value`.
pub fn line_chart(
    id: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> String {
    let all = || series.iter().flat_map(|s| s.points.iter());
    let x = Axis::fit(all().map(|p| p.0), LEFT, WIDTH - RIGHT, false);
    let y = Axis::fit(all().map(|p| p.1), HEIGHT - BOTTOM, plot_top(series), false);
    let mut s = open(id, title);
    frame(&mut s, Some(&x), &y, x_label, y_label);
    for (i, ser) in series.iter().enumerate() {
        let mut starts = vec![0];
        starts.extend(
            ser.gaps
                .iter()
                .copied()
                .filter(|&g| g > 0 && g < ser.points.len()),
        );
        starts.push(ser.points.len());
        for seg in starts.windows(2) {
            let path: Vec<String> = ser.points[seg[0]..seg[1]]
                .iter()
                .map(|&(px, py)| format!("{:.1},{:.1}", x.map(px), y.map(py)))
                .collect();
            // The first series (the reference) is drawn wider, so it shows under later ones.
            let _ = writeln!(
                s,
                "<polyline class=\"series\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"{}\"/>",
                ser.color,
                if i == 0 { 4.0 } else { 1.5 },
                path.join(" ")
            );
        }
        for &(px, py) in &ser.points {
            let _ = writeln!(
                s,
                "<circle class=\"point\" data-series=\"{i}\" data-x=\"{px}\" data-value=\"{py}\" cx=\"{:.1}\" cy=\"{:.1}\" r=\"2.5\" fill=\"{}\"><title>{}: x {px}, {}</title></circle>",
                x.map(px),
                y.map(py),
                ser.color,
                esc(&ser.name),
                short(py)
            );
        }
    }
    legend(&mut s, series);
    s.push_str("</svg>\n");
    s
}

/// Bars from zero to each point's y, grouped by point index across series (every series
/// has the same x values); each bar carries `data-series`, `data-x` and `data-value`.
pub fn bar_chart(id: &str, title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let n = series
        .iter()
        .map(|s| s.points.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let y = Axis::fit(
        series.iter().flat_map(|s| s.points.iter().map(|p| p.1)),
        HEIGHT - BOTTOM,
        plot_top(series),
        true,
    );
    let mut s = open(id, title);
    frame(&mut s, None, &y, x_label, y_label);
    let slot = (WIDTH - RIGHT - LEFT) / n as f64;
    let bar = (slot * 0.8 / series.len().max(1) as f64).max(0.5);
    let zero = y.map(0.0);
    for (i, ser) in series.iter().enumerate() {
        for (j, &(px, py)) in ser.points.iter().enumerate() {
            let bx = LEFT + slot * j as f64 + slot * 0.1 + bar * i as f64;
            let top = y.map(py).min(zero);
            let h = (y.map(py) - zero).abs();
            let _ = writeln!(
                s,
                "<rect class=\"bar\" data-series=\"{i}\" data-x=\"{px}\" data-value=\"{py}\" x=\"{bx:.2}\" y=\"{top:.2}\" width=\"{bar:.2}\" height=\"{h:.2}\" fill=\"{}\"><title>{}: {} {px}, {}</title></rect>",
                ser.color,
                esc(&ser.name),
                esc(x_label),
                short(py)
            );
        }
    }
    // Category labels: about ten evenly spaced.
    let every = n.div_ceil(10);
    if let Some(first) = series.first() {
        for (j, &(px, _)) in first.points.iter().enumerate().step_by(every) {
            let _ = writeln!(
                s,
                "<text class=\"tick\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                LEFT + slot * (j as f64 + 0.5),
                HEIGHT - BOTTOM + 18.0,
                short(px)
            );
        }
    }
    let _ = writeln!(
        s,
        "<line class=\"zero\" x1=\"{LEFT}\" x2=\"{}\" y1=\"{zero:.1}\" y2=\"{zero:.1}\"/>",
        WIDTH - RIGHT
    );
    legend(&mut s, series);
    s.push_str("</svg>\n");
    s
}

/// Bars of the bins' counts, evenly spaced; each carries `data-lo`, `data-hi` and
/// `data-count`.
pub fn histogram(id: &str, title: &str, x_label: &str, color: &str, bins: &[Bin]) -> String {
    let y = Axis::fit(
        bins.iter().map(|b| b.count as f64),
        HEIGHT - BOTTOM,
        TOP,
        true,
    );
    let mut s = open(id, title);
    frame(&mut s, None, &y, x_label, "tokens");
    let slot = (WIDTH - RIGHT - LEFT) / bins.len().max(1) as f64;
    let zero = y.map(0.0);
    for (j, b) in bins.iter().enumerate() {
        let x = LEFT + slot * j as f64;
        let top = y.map(b.count as f64);
        let _ = writeln!(
            s,
            "<rect class=\"bin\" data-lo=\"{}\" data-hi=\"{}\" data-count=\"{}\" x=\"{:.2}\" y=\"{top:.2}\" width=\"{:.2}\" height=\"{:.2}\" fill=\"{color}\"><title>{} to {}: {} tokens</title></rect>",
            b.lo,
            b.hi,
            b.count,
            x + 0.5,
            (slot - 1.0).max(0.5),
            zero - top,
            short(b.lo),
            short(b.hi),
            b.count
        );
        if !b.label.is_empty() {
            let _ = writeln!(
                s,
                "<text class=\"tick\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                HEIGHT - BOTTOM + 18.0,
                esc(&b.label)
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_short_numbers() {
        assert_eq!(esc("a<b>&\"c'"), "a&lt;b&gt;&amp;&quot;c&#39;");
        assert_eq!(short(0.0), "0");
        assert_eq!(short(216.12871), "216.1");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(2.0), "2");
        assert_eq!(short(1e-6), "1e-6");
        assert_eq!(short(2.5e6), "2.5e6");
        assert_eq!(short(-0.0123), "-0.0123");
    }

    #[test]
    fn axes_cover_the_data_with_nice_ticks() {
        let a = Axis::fit([3.2, 17.9].into_iter(), 0.0, 100.0, false);
        assert_eq!((a.lo, a.hi), (0.0, 20.0));
        assert_eq!(a.ticks(), [0.0, 5.0, 10.0, 15.0, 20.0]);
        // Ticks stay on multiples of the step, zero included.
        let d = Axis::fit([-3.7e-5, 6.1e-5].into_iter(), 0.0, 1.0, true);
        assert!(d.ticks().contains(&0.0), "{:?}", d.ticks());
        assert!(d.ticks().iter().all(|t| (t / d.step).fract().abs() < 1e-9));
        assert_eq!(a.map(10.0), 50.0);
        // A flat range is widened; zero can be forced in.
        let flat = Axis::fit([4.0, 4.0].into_iter(), 0.0, 1.0, false);
        assert!(flat.lo < 4.0 && flat.hi > 4.0);
        let z = Axis::fit([-0.3, -0.1].into_iter(), 0.0, 1.0, true);
        assert!(z.lo <= -0.3 && z.hi >= 0.0);
    }

    #[test]
    fn marks_carry_their_exact_values() {
        let series = [Series {
            name: "a<b".into(),
            color: PALETTE[0],
            points: vec![(0.0, 0.1), (1.0, 1.0 / 3.0)],
            gaps: Vec::new(),
        }];
        let line = line_chart("c", "t", "x", "y", &series);
        assert!(line.starts_with("<svg class=\"chart\" id=\"c\""));
        assert!(line.contains("data-value=\"0.3333333333333333\""));
        assert_eq!(line.matches("<circle").count(), 2);
        assert_eq!(line.matches("<polyline").count(), 1);
        let split = [Series {
            name: "s".into(),
            color: PALETTE[0],
            points: vec![(0.0, 1.0), (1.0, 2.0), (5.0, 1.0), (6.0, 2.0)],
            gaps: vec![2],
        }];
        let line2 = line_chart("c", "t", "x", "y", &split);
        assert_eq!(line2.matches("<polyline").count(), 2);
        assert_eq!(line2.matches("<circle").count(), 4);
        assert!(line.contains("a&lt;b") && !line.contains("a<b"));
        let bars = bar_chart("b", "t", "window", "y", &series);
        assert_eq!(bars.matches("<rect class=\"bar\"").count(), 2);
        let hist = histogram(
            "h",
            "t",
            "KLD",
            PALETTE[1],
            &[Bin {
                label: "1e-3".into(),
                lo: 1e-3,
                hi: 1e-2,
                count: 7,
            }],
        );
        assert!(hist.contains("data-lo=\"0.001\" data-hi=\"0.01\" data-count=\"7\""));
        assert!(hist.ends_with("</svg>\n"));
    }
}
