//! The charts' one numeric axis ([`Scale`]: a round range, its grid lines and where a
//! value falls), which the report's time-series, the sweep's lines and the tune's
//! scatter charts all draw on; and the line charts of report.html, inline SVG: a line per
//! series over the run's seconds (or any axis of equal steps), the fault window shaded, a
//! round grid.

use std::fmt::Write;

use super::model::SeriesPoint;
use super::table::html as esc;

// Wide enough that a retry wave of a few hundred milliseconds is seen without zooming;
// the page scales it down on a narrow screen (width 100%, the viewBox keeps its shape).
const W: f64 = 1000.0;
const H: f64 = 280.0;
const PAD_L: f64 = 48.0;
const PAD_B: f64 = 24.0;
const PAD_T: f64 = 12.0;

/// A numeric axis: values from `lo` over `span`, a grid line every `step`. Time axes
/// (the run's seconds, 50 ms buckets) and value axes (counts from zero, a sweep's
/// amplification, a tune's server load) are all one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Scale {
    pub(crate) lo: f64,
    pub(crate) span: f64,
    pub(crate) step: f64,
}

impl Scale {
    /// Counts up to `top`: from zero to a round top at or above it, in round steps
    /// ([`grid`]).
    pub(crate) fn counts(top: f64) -> Scale {
        let (step, max) = grid(top);
        Scale {
            lo: 0.0,
            span: max,
            step,
        }
    }

    /// A round range around `lo..=hi` that need not start at zero ([`nice_range`]).
    pub(crate) fn around(lo: f64, hi: f64) -> Scale {
        let (lo, hi, step) = nice_range(lo, hi);
        Scale::fixed(lo, hi, step)
    }

    /// From `lo` to `hi`, a grid line every `step`.
    pub(crate) fn fixed(lo: f64, hi: f64, step: f64) -> Scale {
        Scale {
            lo,
            span: hi - lo,
            step,
        }
    }

    /// `len` steps of `step` from `from` (a time axis: seconds, or 50 ms buckets).
    pub(crate) fn steps(from: f64, step: f64, len: usize) -> Scale {
        Scale {
            lo: from,
            span: len.max(1) as f64 * step,
            step,
        }
    }

    /// Where `v` falls, 0 at the bottom of the range and 1 at its top.
    pub(crate) fn frac(&self, v: f64) -> f64 {
        (v - self.lo) / self.span
    }

    /// `v` across a plot `width` wide from `left`.
    pub(crate) fn x(&self, v: f64, left: f64, width: f64) -> f64 {
        left + self.frac(v) * width
    }

    /// `v` up a plot `height` high from `top` (larger values higher).
    pub(crate) fn y(&self, v: f64, top: f64, height: f64) -> f64 {
        top + (1.0 - self.frac(v)) * height
    }

    /// The values of the grid lines, bottom to top (at most [`MAX_TICKS`]: a step too
    /// fine for its span, zero or not a number, is a bug shown as two lines, not a hang).
    pub(crate) fn ticks(&self) -> impl Iterator<Item = f64> + use<> {
        let Scale { lo, span, step } = *self;
        let steps = span / step;
        let (n, step) = if (0.0..=f64::from(MAX_TICKS)).contains(&steps) {
            (steps.round() as u32, step)
        } else {
            (1, span)
        };
        (0..=n).map(move |k| lo + step * f64::from(k))
    }

    /// The decimals that tell the grid lines apart: as many as the step has (0.05: two,
    /// 0.25: two, 0.5: one, 20: none), so `1.05, 1.10, 1.15, 1.20`, never
    /// `1.1, 1.1, 1.1, 1.2`.
    pub(crate) fn decimals(&self) -> usize {
        (0..=9)
            .find(|d| {
                let scaled = self.step * 10f64.powi(*d as i32);
                scaled.round() != 0.0 && (scaled - scaled.round()).abs() < 1e-6 * scaled.abs()
            })
            .unwrap_or(9)
    }

    /// A grid line's label at the step's precision ([`Scale::decimals`]); whole
    /// thousands from 10 000 up as `20k`.
    pub(crate) fn label(&self, v: f64) -> String {
        let d = self.decimals();
        if d == 0 && v.abs() >= 10_000.0 && (self.step % 1000.0) == 0.0 {
            return format!("{:.0}k", v / 1000.0);
        }
        let text = format!("{v:.d$}");
        // `-0.00` reads as a value below zero.
        if text.starts_with('-') && text[1..].chars().all(|c| c == '0' || c == '.') {
            text[1..].to_owned()
        } else {
            text
        }
    }
}

/// The most grid lines an axis draws.
const MAX_TICKS: u32 = 50;

/// The opening of a standalone value chart (the sweep's, the tune's): an SVG `w` by `h`
/// with its title, said to screen readers and written in bold above the plot, from `left`.
pub(crate) fn titled_svg(w: f64, h: f64, left: f64, title: &str) -> String {
    let title = esc(title);
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img"><title>{title}</title><text x="{left}" y="18" font-size="13" font-weight="bold">{title}</text>"##
    )
}

/// A line chart of several series over the run's seconds.
pub(super) fn chart(
    title: &str,
    seconds: usize,
    lines: &[(&str, &str, Vec<f64>)],
    window: Option<[f64; 2]>,
    shade: &[bool],
) -> String {
    let axis = Axis {
        from: 0.0,
        step: 1.0,
        len: seconds,
        tick: round_tick(seconds, 1),
    };
    chart_on(title, &axis, lines, window, shade)
}

/// A label every `tick` steps of an axis of `len` steps, `per_second` to a second: the
/// roundest interval (200 or 500 ms where steps are that fine, else 1, 2, 5, 10, 15, …
/// seconds) that leaves at most a dozen labels.
pub(super) fn round_tick(len: usize, per_second: usize) -> usize {
    const SECONDS: [usize; 11] = [1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600];
    let per_second = per_second.max(1);
    let fractions = [5, 2]
        .into_iter()
        .filter(|parts| per_second.is_multiple_of(*parts))
        .map(|parts| per_second / parts);
    fractions
        .chain(SECONDS.iter().map(|s| s * per_second))
        .find(|tick| len.div_ceil(*tick) <= 12)
        .unwrap_or_else(|| len.div_ceil(12))
}

/// The x axis of a chart: `len` steps of `step` seconds from `from`, a label every
/// `tick` steps.
pub(super) struct Axis {
    pub(super) from: f64,
    pub(super) step: f64,
    pub(super) len: usize,
    pub(super) tick: usize,
}

/// A line chart of several series, one value per step of `axis`.
pub(super) fn chart_on(
    title: &str,
    axis: &Axis,
    lines: &[(&str, &str, Vec<f64>)],
    window: Option<[f64; 2]>,
    shade: &[bool],
) -> String {
    let values = Scale::counts(
        lines
            .iter()
            .flat_map(|(_, _, v)| v.iter().copied())
            .fold(0.0f64, f64::max),
    );
    // The axis runs over whole steps; each step's value is plotted at its middle, so the
    // fault window's shading lines up with the steps it covers.
    let n = axis.len.max(1) as f64;
    let time = Scale::steps(axis.from, axis.step, axis.len);
    let x = |t: f64| time.x(t, PAD_L, W - PAD_L - 8.0);
    let y = |v: f64| values.y(v, PAD_T, H - PAD_T - PAD_B);
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<figure><figcaption>{}</figcaption><svg viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" style=\"width:100%;height:auto\" role=\"img\" aria-label=\"{}\">",
        esc(title),
        esc(title)
    );
    if let Some([a, b]) = window {
        let _ = write!(
            svg,
            "<rect x=\"{:.1}\" y=\"{PAD_T}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#fde2e1\"><title>fault window {a}–{b} s</title></rect>",
            x(a),
            (x(b.min(axis.from + n * axis.step)) - x(a)).max(0.0),
            H - PAD_T - PAD_B
        );
    }
    for (t, open) in shade.iter().enumerate() {
        if *open {
            let _ = write!(
                svg,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"6\" fill=\"#c0392b\"><title>breaker open in second {t}</title></rect>",
                x(axis.from + t as f64 * axis.step),
                H - PAD_B - 6.0,
                (x(axis.from + axis.step) - x(axis.from)).max(1.0)
            );
        }
    }
    // Axes and a grid line at each round step.
    for v in values.ticks() {
        let _ = write!(
            svg,
            "<line x1=\"{PAD_L}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"end\">{}</text>",
            W - 8.0,
            y(v),
            y(v),
            PAD_L - 4.0,
            y(v) + 3.0,
            short(v)
        );
    }
    for i in (0..=axis.len).step_by(axis.tick.max(1)) {
        let t = axis.from + i as f64 * axis.step;
        let _ = write!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"10\" text-anchor=\"middle\">{}s</text>",
            x(t),
            H - 6.0,
            (t * 100.0).round() / 100.0
        );
    }
    for (name, color, values) in lines {
        let points: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let t = axis.from + (i as f64 + 0.5) * axis.step;
                format!("{:.1},{:.1}", x(t), y(*v))
            })
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"><title>{}</title></polyline>",
            points.join(" "),
            esc(name)
        );
    }
    svg.push_str("</svg><div class=\"legend\">");
    for (name, color, _) in lines {
        let _ = write!(
            svg,
            "<span><i style=\"background:{color}\"></i>{}</span>",
            esc(name)
        );
    }
    svg.push_str("</div></figure>");
    svg
}

/// A round grid for values up to `top`: its step (1, 2 or 5 times a power of ten, at most
/// five lines) and the chart's top, a whole number of steps at or above `top`. Readers
/// read 0, 500, 1000, 1500, not 0, 268, 535, 802, 1070.
fn grid(top: f64) -> (f64, f64) {
    let top = top.max(1.0);
    let rough = top / 4.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power)
        .max(if top <= 4.0 { 0.5 } else { 1.0 });
    (step, (top / step).ceil() * step)
}

/// A round axis for values from `lo` to `hi` that need not start at zero (a sweep's
/// amplification between 1.4 and 1.9): its bottom, its top and its step, each a whole
/// number of steps, the step 1, 2 or 5 times a power of ten. A range of one value gets a
/// step around it.
fn nice_range(lo: f64, hi: f64) -> (f64, f64, f64) {
    if !(lo.is_finite() && hi.is_finite()) {
        return (0.0, 1.0, 0.5);
    }
    let (lo, hi) = (lo.min(hi), lo.max(hi));
    // All values equal: a range around them a tenth of their size (1 around zero), so
    // the line sits between two labels that differ.
    let size = hi.abs().max(lo.abs());
    let span = if hi - lo > size * 1e-9 {
        hi - lo
    } else if size > 0.0 {
        size * 0.1
    } else {
        1.0
    };
    let rough = span / 4.0;
    let power = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * power);
    // Within a rounding error of a grid line, on it: 1.05 / 0.05 is 21.000000000000004.
    let snap = |v: f64| {
        let k = v / step;
        if (k - k.round()).abs() < 1e-9 {
            k.round()
        } else {
            k
        }
    };
    let mut bottom = snap(lo).floor() * step;
    let mut top = snap(hi).ceil() * step;
    // At least three grid lines, never below zero for values that are not.
    while top - bottom < 2.0 * step - step * 1e-9 {
        if lo >= 0.0 && bottom - step < -step * 1e-9 {
            top += step;
        } else {
            bottom -= step;
            if top - bottom < 2.0 * step - step * 1e-9 {
                top += step;
            }
        }
    }
    (bottom, top, step)
}

pub(crate) fn short(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

pub(super) fn column(series: &[SeriesPoint], f: impl Fn(&SeriesPoint) -> f64) -> Vec<f64> {
    series.iter().map(f).collect()
}

/// The budget level per second, each second without a sample (the drain after the last
/// one) carrying the last value seen.
pub(super) fn carried(series: &[SeriesPoint]) -> Vec<f64> {
    let mut last = 0.0;
    series
        .iter()
        .map(|x| {
            last = x.budget_tokens.unwrap_or(last);
            last
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{Scale, grid, round_tick};

    #[test]
    fn one_scale_serves_counts_time_and_values() {
        let counts = Scale::counts(1070.0);
        let ticks: Vec<f64> = counts.ticks().collect();
        assert_eq!(ticks, [0.0, 500.0, 1000.0, 1500.0]);
        assert!((counts.y(1500.0, 12.0, 244.0) - 12.0).abs() < 1e-9);
        assert!((counts.y(0.0, 12.0, 244.0) - 256.0).abs() < 1e-9);
        let seconds = Scale::steps(3.0, 0.05, 60);
        assert!((seconds.x(6.0, 48.0, 944.0) - 992.0).abs() < 1e-9);
        let around = Scale::around(1.41, 1.87);
        assert_eq!(around.ticks().count(), 4, "1.4, 1.6, 1.8, 2.0");
    }

    #[test]
    fn time_labels_fall_on_round_seconds() {
        // Seconds: 1, 2, 5, 10, 15, … so that at most a dozen labels show.
        assert_eq!(round_tick(10, 1), 1);
        assert_eq!(round_tick(12, 1), 1);
        assert_eq!(round_tick(23, 1), 2);
        assert_eq!(round_tick(35, 1), 5);
        assert_eq!(round_tick(130, 1), 15);
        assert_eq!(round_tick(3600, 1), 300);
        // 50 ms steps (20 to the second): every 200 or 500 ms over a short window, else
        // round seconds.
        assert_eq!(round_tick(40, 20), 4);
        assert_eq!(round_tick(60, 20), 10);
        assert_eq!(round_tick(200, 20), 20);
        assert_eq!(round_tick(600, 20), 100);
    }

    #[test]
    fn the_grid_steps_are_round_and_cover_the_top() {
        assert_eq!(grid(1070.0), (500.0, 1500.0));
        assert_eq!(grid(3.42), (1.0, 4.0));
        assert_eq!(grid(0.0), (0.5, 1.0));
        assert_eq!(grid(20_000.0), (5000.0, 20_000.0));
        assert_eq!(grid(103.4), (50.0, 150.0));
    }

    /// The labels of the grid of a round range around `lo..=hi`.
    fn labels(lo: f64, hi: f64) -> Vec<String> {
        let scale = Scale::around(lo, hi);
        scale.ticks().map(|v| scale.label(v)).collect()
    }

    #[test]
    fn grid_labels_are_distinct_round_numbers() {
        assert_eq!(labels(1.05, 1.2), ["1.05", "1.10", "1.15", "1.20"]);
        assert_eq!(labels(1.41, 1.87), ["1.4", "1.6", "1.8", "2.0"]);
        assert_eq!(labels(0.0, 0.0), ["0.0", "0.5", "1.0"], "all zero");
        assert_eq!(labels(1.0, 1.0), ["0.95", "1.00", "1.05"], "all equal");
        assert_eq!(labels(3.0, 3.0), ["2.9", "3.0", "3.1"]);
        assert_eq!(labels(0.0, 7.0), ["0", "2", "4", "6", "8"]);
        assert_eq!(
            labels(12_000.0, 31_000.0),
            ["10k", "15k", "20k", "25k", "30k", "35k"]
        );
        for (lo, hi) in [
            (1.05, 1.2),
            (0.0, 0.0),
            (1.0, 1.0),
            (0.001, 0.0012),
            (99.0, 101.0),
            (1.0, 1.000_000_1),
            (0.0, 1e9),
            (-5.0, 3.0),
        ] {
            let l = labels(lo, hi);
            let mut distinct = l.clone();
            distinct.dedup();
            assert_eq!(l, distinct, "{lo}..{hi}");
            assert!((3..=12).contains(&l.len()), "{lo}..{hi}: {l:?}");
            let scale = Scale::around(lo, hi);
            let ticks: Vec<f64> = scale.ticks().collect();
            assert!(
                ticks[0] <= lo && ticks[ticks.len() - 1] >= hi,
                "{lo}..{hi}: {ticks:?}"
            );
            assert!(
                lo < 0.0 || ticks[0] >= 0.0,
                "never below zero for {lo}..{hi}"
            );
        }
    }

    #[test]
    fn a_degenerate_axis_draws_a_few_lines_not_a_hang() {
        assert_eq!(Scale::around(f64::NAN, 1.0).ticks().count(), 3);
        assert_eq!(Scale::fixed(0.0, 1.0, 0.0).ticks().count(), 2);
        assert_eq!(Scale::fixed(0.0, 1.0, f64::NAN).ticks().count(), 2);
        assert_eq!(Scale::fixed(0.0, 1e12, 1e-3).ticks().count(), 2);
    }

    #[test]
    fn a_range_that_does_not_start_at_zero_keeps_its_own_bottom() {
        let (bottom, top, step) = super::nice_range(1.41, 1.87);
        assert!((step - 0.2).abs() < 1e-9, "{step}");
        assert!(
            (bottom - 1.4).abs() < 1e-9 && (top - 2.0).abs() < 1e-9,
            "{bottom} {top}"
        );
        let (bottom, top, _) = super::nice_range(1.0, 1.0);
        assert!(bottom < 1.0 && top > 1.0, "{bottom} {top}");
        assert!(
            super::nice_range(0.0, 0.0).0 >= 0.0,
            "never below zero for counts"
        );
    }
}
