//! Horizontal bar charts as hand-written SVG: one row per category (long benchmark names read
//! well on the left), a linear or logarithmic axis with grid lines and a label, the value at
//! every bar, a legend when there are several series, and optional target markers.

use crate::catalog::{
    self, AUDIO_CPU, AUDIO_SOURCE, CASES, DEFAULT_VARIANT, NET_SOURCE, STATE_CLASSES,
};
use crate::model::{CaseRun, Results, Run, Summary};
use crate::numbers::{int, num};
use crate::table1;

/// Ticks shown in the figure, as in the study's Figures 9 and 10 (1.5 s).
pub const PLOT_TICKS: usize = 150;
use std::fmt::Write;

/// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
const PALETTE: [&str; 8] =
    ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"];
const TARGET_COLOR: &str = "#C00000";
const FONT: &str = "font-family=\"sans-serif\" font-size=\"12\"";
/// Rough width of a character at 12 px, for layout.
const CHAR_W: f64 = 7.0;
const WIDTH: f64 = 900.0;
/// A white outline behind value labels, so that a target line under one does not hide it.
const HALO: &str = "stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\"";

pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub categories: Vec<String>,
    pub series: Vec<String>,
    /// `values[category][series]`; `None` draws "not measured".
    pub values: Vec<Vec<Option<f64>>>,
    /// Stack the series in one bar (else one bar per series).
    pub stacked: bool,
    /// A logarithmic axis, for figures spanning orders of magnitude (positive values only;
    /// not with `stacked`).
    pub log: bool,
    /// Values are differences: labelled with their sign, and may be negative (linear only).
    pub signed: bool,
    /// Per category: a target value drawn as a dashed line, and its tooltip.
    pub markers: Vec<Option<(f64, String)>>,
    /// The legend's name for the markers.
    pub marker_label: String,
    /// Value labels with this many decimals (else [`num`]: an integer or one decimal).
    pub decimals: Option<usize>,
}

/// A chart's opening: the `<svg>` element `height` high, a white background and the title.
fn open(height: f64, title: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" {FONT}>"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"16\" \
         font-weight=\"bold\">{}</text>",
        WIDTH / 2.0,
        escape(title)
    );
    s
}

pub fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// An axis step of 1, 2 or 5 times a power of ten giving at most about 6 intervals.
pub fn nice_step(span: f64) -> f64 {
    if span <= 0.0 {
        return 1.0;
    }
    let rough = span / 6.0;
    let mag = 10f64.powf(rough.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|s| *s >= rough).unwrap_or(10.0 * mag)
}

/// Where values go along the bars: `frac` maps a value to 0..=1 of the plot's width.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Axis {
    /// `min` (0 or below) to `max` in steps of `step`.
    Linear { min: f64, max: f64, step: f64 },
    /// 1 to 10^`decades`.
    Log { decades: u32 },
}

impl Axis {
    /// An axis covering `lo..=hi` and 0.
    pub fn linear(lo: f64, hi: f64) -> Self {
        let (lo, hi) = (lo.min(0.0), hi.max(0.0));
        let step = nice_step(hi - lo);
        let min = (lo / step).floor() * step;
        let max = ((hi / step).ceil() * step).max(min + step);
        Self::Linear { min, max, step }
    }

    pub fn log(hi: f64) -> Self {
        Self::Log { decades: (hi.max(10.0).log10().ceil() as u32).max(1) }
    }

    pub fn frac(&self, v: f64) -> f64 {
        match *self {
            Self::Linear { min, max, .. } => (v - min) / (max - min),
            // Values below 1 (a zero) sit at the origin.
            Self::Log { decades } => v.max(1.0).log10() / f64::from(decades),
        }
    }

    /// Where bars start.
    pub fn origin(&self) -> f64 {
        match self {
            Self::Linear { .. } => 0.0,
            Self::Log { .. } => 1.0,
        }
    }

    /// A grid position's label: an integer, or as many decimals as a step below 1 needs.
    pub fn tick_label(&self, t: f64) -> String {
        match *self {
            Self::Linear { step, .. } if step < 1.0 => {
                let d = (-step.log10()).ceil().max(0.0) as usize;
                format!("{t:.d$}")
            }
            _ => int(t),
        }
    }

    /// Grid positions, and whether each gets a label: every step; or every power of ten
    /// (labelled) with 2x and 5x between.
    pub fn ticks(&self) -> Vec<(f64, bool)> {
        match *self {
            Self::Linear { min, max, step } => {
                let n = ((max - min) / step).round() as i64;
                (0..=n).map(|i| (min + i as f64 * step, true)).collect()
            }
            Self::Log { decades } => {
                let mut t = Vec::new();
                for d in 0..=decades {
                    let p = 10f64.powi(d as i32);
                    t.push((p, true));
                    if d < decades {
                        t.push((2.0 * p, false));
                        t.push((5.0 * p, false));
                    }
                }
                t
            }
        }
    }
}

impl Chart {
    /// The extent of category `c`'s bars: (lowest, highest) end.
    fn extent(&self, c: usize) -> (f64, f64) {
        let vals = self.values[c].iter().flatten().copied();
        if self.stacked {
            (0.0, vals.filter(|v| *v > 0.0).sum())
        } else {
            vals.fold((0.0, 0.0), |(lo, hi), v| (f64::min(lo, v), f64::max(hi, v)))
        }
    }

    fn label(&self, v: f64) -> String {
        let text = match self.decimals {
            Some(d) => format!("{v:.d$}"),
            None => num(v),
        };
        if self.signed && v > 0.0 { format!("+{text}") } else { text }
    }

    pub fn render(&self) -> String {
        let label_w = self.categories.iter().map(|c| c.chars().count()).max().unwrap_or(0) as f64
            * CHAR_W
            + 16.0;
        let left = label_w.max(80.0);
        let right = 70.0; // room for the value after the longest bar
        let plot_w = WIDTH - left - right;

        // Legend entries (a series colour, or the target marker), wrapped to the width.
        let has_markers = self.markers.iter().any(Option::is_some);
        let mut legend: Vec<(Option<usize>, &str)> = Vec::new();
        if self.series.len() > 1 || has_markers {
            legend.extend(self.series.iter().enumerate().map(|(i, n)| (Some(i), n.as_str())));
        }
        if has_markers {
            legend.push((None, self.marker_label.as_str()));
        }
        let mut placed = Vec::new();
        let (mut lx, mut row) = (left, 0);
        for (kind, text) in legend {
            let w = 16.0 + text.chars().count() as f64 * CHAR_W + 18.0;
            if lx + w > WIDTH - 10.0 && lx > left {
                (lx, row) = (left, row + 1);
            }
            placed.push((kind, text, lx, 36.0 + row as f64 * 18.0));
            lx += w;
        }
        let rows = if placed.is_empty() { 0 } else { row + 1 };
        let top = 40.0 + rows as f64 * 18.0 + if rows > 0 { 6.0 } else { 0.0 };
        let bar_h = 16.0;
        let bars = if self.stacked { 1 } else { self.series.len().max(1) };
        let band = bars as f64 * bar_h + 14.0;
        let plot_h = band * self.categories.len() as f64;
        let height = top + plot_h + 52.0;

        let (lo, hi) = (0..self.categories.len())
            .map(|c| self.extent(c))
            .chain(self.markers.iter().flatten().map(|(v, _)| (*v, *v)))
            .fold((0.0, 0.0), |(a, b), (l, h)| (f64::min(a, l), f64::max(b, h)));
        // A little headroom, so that a bar or target at a round number is not on the frame.
        let axis = if self.log && !self.stacked && lo >= 0.0 {
            Axis::log(hi * 1.04)
        } else {
            Axis::linear(lo * 1.04, hi * 1.04)
        };
        let x = |v: f64| left + axis.frac(v) * plot_w;
        let x0 = x(axis.origin());

        let mut s = open(height, &self.title);
        for (kind, text, lx, ly) in placed {
            match kind {
                Some(i) => {
                    let _ = writeln!(
                        s,
                        "<rect x=\"{lx}\" y=\"{ly}\" width=\"12\" height=\"12\" fill=\"{}\"/>",
                        PALETTE[i % PALETTE.len()]
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "<line x1=\"{lx}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{TARGET_COLOR}\" \
                         stroke-width=\"2\" stroke-dasharray=\"4 3\"/>",
                        ly + 6.0,
                        lx + 12.0,
                        ly + 6.0
                    );
                }
            }
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{}\">{}</text>",
                lx + 16.0,
                ly + 10.0,
                escape(text)
            );
        }

        // Grid and axes.
        for (t, labelled) in axis.ticks() {
            let gx = x(t);
            let grid = if labelled { "#dddddd" } else { "#f0f0f0" };
            let _ = writeln!(
                s,
                "<line x1=\"{gx:.1}\" y1=\"{top}\" x2=\"{gx:.1}\" y2=\"{}\" stroke=\"{grid}\"/>",
                top + plot_h
            );
            if labelled {
                let _ = writeln!(
                    s,
                    "<text x=\"{gx:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#333\">{}</text>",
                    top + plot_h + 16.0,
                    axis.tick_label(t)
                );
            }
        }
        let _ = writeln!(
            s,
            "<line x1=\"{x0:.1}\" y1=\"{top}\" x2=\"{x0:.1}\" y2=\"{}\" stroke=\"#333\"/>\
             <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>",
            top + plot_h,
            top + plot_h,
            left + plot_w,
            top + plot_h
        );
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            left + plot_w / 2.0,
            top + plot_h + 38.0,
            escape(&self.x_label)
        );

        // Bars, then target lines, then the value labels over both.
        let mut labels = String::new();
        for (c, cat) in self.categories.iter().enumerate() {
            let y0 = top + c as f64 * band + 7.0;
            let _ = writeln!(
                s,
                "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                left - 8.0,
                y0 + bars as f64 * bar_h / 2.0 + 4.0,
                escape(cat)
            );
            if self.stacked {
                self.stacked_bar(&mut s, &mut labels, c, y0, bar_h, &x);
                continue;
            }
            for (i, v) in self.values[c].iter().enumerate() {
                let y = y0 + i as f64 * bar_h;
                let ty = y + bar_h - 5.0;
                let Some(v) = *v else {
                    let _ = writeln!(
                        labels,
                        "<text x=\"{:.1}\" y=\"{ty:.1}\" fill=\"#888\" font-style=\"italic\">\
                         not measured</text>",
                        x0 + 4.0
                    );
                    continue;
                };
                let (a, b) = (x0.min(x(v)), x0.max(x(v)));
                let _ = writeln!(
                    s,
                    "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">\
                     <title>{}: {}</title></rect>",
                    b - a,
                    bar_h - 2.0,
                    PALETTE[i % PALETTE.len()],
                    escape(&self.series[i]),
                    self.label(v)
                );
                let (tx, anchor) = if v < 0.0 { (a - 4.0, "end") } else { (b + 4.0, "start") };
                let _ = writeln!(
                    labels,
                    "<text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\" {HALO}>{}</text>",
                    self.label(v)
                );
            }
        }
        for (c, marker) in self.markers.iter().enumerate() {
            let Some((v, tip)) = marker else { continue };
            let y0 = top + c as f64 * band + 7.0;
            let mx = x(*v);
            let _ = writeln!(
                s,
                "<line x1=\"{mx:.1}\" y1=\"{:.1}\" x2=\"{mx:.1}\" y2=\"{:.1}\" \
                 stroke=\"{TARGET_COLOR}\" stroke-width=\"2\" stroke-dasharray=\"4 3\">\
                 <title>{}</title></line>",
                y0 - 4.0,
                y0 + bars as f64 * bar_h + 2.0,
                escape(tip)
            );
        }
        s.push_str(&labels);
        s.push_str("</svg>\n");
        s
    }

    fn stacked_bar(
        &self,
        s: &mut String,
        labels: &mut String,
        c: usize,
        y: f64,
        bar_h: f64,
        x: &dyn Fn(f64) -> f64,
    ) {
        let ty = y + bar_h - 5.0;
        let mut acc = 0.0;
        for (i, v) in self.values[c].iter().enumerate() {
            let Some(v) = *v else { continue };
            if v <= 0.0 {
                continue;
            }
            let (a, b) = (x(acc), x(acc + v));
            let _ = writeln!(
                s,
                "<rect x=\"{a:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\" \
                 stroke=\"white\" stroke-width=\"0.5\"><title>{}: {}</title></rect>",
                b - a,
                bar_h - 2.0,
                PALETTE[i % PALETTE.len()],
                escape(&self.series[i]),
                num(v)
            );
            let text = num(v);
            if b - a > text.len() as f64 * CHAR_W + 4.0 {
                let _ = writeln!(
                    s,
                    "<text x=\"{:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\" fill=\"white\">\
                     {text}</text>",
                    (a + b) / 2.0
                );
            }
            acc += v;
        }
        let _ = writeln!(
            labels,
            "<text x=\"{:.1}\" y=\"{ty:.1}\" font-weight=\"bold\" {HALO}>{}</text>",
            x(acc) + 4.0,
            num(acc)
        );
    }
}

/// The benchmarks a run reports, catalogue order first.
fn bench_names(run: &Run) -> Vec<String> {
    let mut names: Vec<String> = catalog::BENCHES
        .iter()
        .filter(|b| run.figure(b.name).is_some())
        .map(|b| b.name.to_owned())
        .collect();
    for f in &run.figures {
        if !names.contains(&f.name) {
            names.push(f.name.clone());
        }
    }
    names
}

/// Median instructions of the default build, with target markers; log scale, since the
/// figures span from a few instructions (IRQ completion) to thousands.
pub fn micro(r: &Results) -> Option<String> {
    let run = r.micro()?;
    let names = bench_names(run);
    if names.is_empty() {
        return None;
    }
    let chart = Chart {
        title: "armhv microbenchmarks: median path length".into(),
        x_label: format!("instructions, log scale (under icount, {}; lower is better)", r.meta.cpu),
        categories: names.iter().map(|n| catalog::row(n).to_owned()).collect(),
        series: vec!["median".into()],
        values: names.iter().map(|n| vec![run.figure(n).map(|f| f.median)]).collect(),
        stacked: false,
        log: true,
        signed: false,
        markers: names
            .iter()
            .map(|n| {
                use catalog::Target::*;
                match catalog::bench(n)?.target? {
                    AtMost(v) => Some((v, format!("target: at most {}", int(v)))),
                    Below(v) => Some((v, format!("target: below {}", int(v)))),
                    NoExits => None,
                }
            })
            .collect(),
        marker_label: "target".into(),
        decimals: None,
    };
    Some(chart.render())
}

/// The world-switch breakdown: one stacked bar per path.
pub fn breakdown(r: &Results) -> Option<String> {
    let paths = r.breakdown();
    if paths.is_empty() {
        return None;
    }
    let mut classes: Vec<String> = STATE_CLASSES.iter().map(|(c, _)| (*c).to_owned()).collect();
    for p in paths {
        for (c, _) in &p.classes {
            if !classes.contains(c) {
                classes.push(c.clone());
            }
        }
    }
    // Only classes that cost something somewhere.
    classes.retain(|c| paths.iter().any(|p| p.class(c).is_some_and(|v| v > 0.0)));
    let chart = Chart {
        title: "World-switch breakdown by state class (Table III)".into(),
        x_label: "mean instructions per event (under icount)".into(),
        categories: paths.iter().map(|p| catalog::path_label(&p.path).to_owned()).collect(),
        series: classes.iter().map(|c| catalog::class_label(c).to_owned()).collect(),
        values: paths.iter().map(|p| classes.iter().map(|c| p.class(c)).collect()).collect(),
        stacked: true,
        log: false,
        signed: false,
        markers: Vec::new(),
        marker_label: String::new(),
        decimals: None,
    };
    Some(chart.render())
}

/// The ablations: with the default run, what each design change costs per benchmark (the
/// ablation's median minus the default's, linear); without it, the medians (log).
pub fn ablations(r: &Results) -> Option<String> {
    let runs: Vec<&Run> = r.ablations().collect();
    if runs.is_empty() {
        return None;
    }
    let series = runs.iter().map(|r| r.variant.clone()).collect();
    let chart = match r.micro() {
        Some(default) => {
            let names = bench_names(default);
            Chart {
                title: format!(
                    "Design ablations: instructions added vs the {DEFAULT_VARIANT} build"
                ),
                x_label: "Δ median instructions (under icount; positive: the default design saves \
                          them)"
                    .into(),
                categories: names.iter().map(|n| catalog::row(n).to_owned()).collect(),
                series,
                values: names
                    .iter()
                    .map(|n| {
                        let base = default.figure(n).map(|f| f.median);
                        runs.iter().map(|r| Some(r.figure(n)?.median - base?)).collect()
                    })
                    .collect(),
                stacked: false,
                log: false,
                signed: true,
                markers: Vec::new(),
                marker_label: String::new(),
                decimals: None,
            }
        }
        None => {
            let names = bench_names(runs[0]);
            Chart {
                title: "Design ablations: median path length per variant".into(),
                x_label: "instructions, log scale (under icount; lower is better)".into(),
                categories: names.iter().map(|n| catalog::row(n).to_owned()).collect(),
                series,
                values: names
                    .iter()
                    .map(|n| runs.iter().map(|r| r.figure(n).map(|f| f.median)).collect())
                    .collect(),
                stacked: false,
                log: true,
                signed: false,
                markers: Vec::new(),
                marker_label: String::new(),
                decimals: None,
            }
        }
    };
    Some(chart.render())
}

/// The application workloads: armhv's figure normalized to native's, with native (1.00)
/// marked on every row, as in the study's figure.
pub fn workloads(r: &Results) -> Option<String> {
    let rows: Vec<&Summary> = r.workloads.iter().filter(|s| s.normalized.is_some()).collect();
    if rows.is_empty() {
        return None;
    }
    let chart = Chart {
        title: "Application workloads under armhv, normalized to native".into(),
        x_label: "armhv time / native, or native throughput / armhv (wall clock; 1.00 = no \
                  overhead)"
            .into(),
        categories: rows
            .iter()
            .map(|s| {
                catalog::workload(&s.workload).map_or(s.workload.clone(), |w| {
                    if w.network { format!("{} *", w.row) } else { w.row.to_owned() }
                })
            })
            .collect(),
        series: vec!["median".into(), "best of n".into()],
        values: rows.iter().map(|s| vec![s.normalized, s.normalized_best]).collect(),
        stacked: false,
        log: false,
        signed: false,
        markers: rows.iter().map(|_| Some((1.0, "native = 1.00".to_owned()))).collect(),
        marker_label: "native = 1.00 (* network: native over loopback)".into(),
        decimals: Some(2),
    };
    Some(chart.render())
}

/// The distributor experiment's bandwidth per case relative to case 1, measured and the
/// study's (the absolute figures are the table's: TCG's and an ARM11's do not compare).
pub fn distributor_bandwidth(runs: &[Run]) -> Option<String> {
    let rows = table1::rows(runs);
    if rows.iter().all(|r| r.relative.is_none()) {
        return None;
    }
    let base = CASES[0].study_mbit;
    let chart = Chart {
        title: "Interrupt distributor (Table 1): bandwidth relative to case 1".into(),
        x_label: "iperf3 bandwidth into the general-purpose VM / case 1's (no audio)".into(),
        categories: rows
            .iter()
            .map(|r| format!("{} {} (net: {})", r.case.number, r.case.name, r.network_cores))
            .collect(),
        series: vec!["armhv (measured)".into(), "study (ARM11 MPCore)".into()],
        values: rows.iter().map(|r| vec![r.relative, Some(r.case.study_mbit / base)]).collect(),
        stacked: false,
        log: false,
        signed: false,
        markers: Vec::new(),
        marker_label: String::new(),
        decimals: Some(2),
    };
    Some(chart.render())
}

/// One line of a tick chart: a value per tick.
pub struct Line {
    pub name: String,
    pub values: Vec<f64>,
}

/// One panel of a tick chart.
pub struct Panel {
    pub title: String,
    pub lines: Vec<Line>,
}

/// Small multiples over time: one panel per case, ticks along x, a step line per series,
/// one y scale for all panels; a series keeps its colour (by name) in every panel.
pub struct TickChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<Panel>,
}

impl TickChart {
    pub fn render(&self) -> String {
        let mut names: Vec<&str> = Vec::new();
        for l in self.panels.iter().flat_map(|p| &p.lines) {
            if !names.contains(&l.name.as_str()) {
                names.push(&l.name);
            }
        }
        let color = |name: &str| {
            PALETTE[names.iter().position(|n| *n == name).unwrap_or(0) % PALETTE.len()]
        };
        let ticks = self.panels.iter().flat_map(|p| &p.lines).map(|l| l.values.len()).max();
        let ticks = ticks.unwrap_or(0).max(1);
        let hi = self
            .panels
            .iter()
            .flat_map(|p| &p.lines)
            .flat_map(|l| l.values.iter().copied())
            .fold(0.0, f64::max);
        let axis = Axis::linear(0.0, hi.max(1.0));
        let Axis::Linear { max: y_max, .. } = axis else { unreachable!() };

        let (left, right) = (60.0, 20.0);
        let plot_w = WIDTH - left - right;
        // Legend rows.
        let mut placed = Vec::new();
        let (mut lx, mut row) = (left, 0);
        for name in &names {
            let w = 16.0 + name.chars().count() as f64 * CHAR_W + 18.0;
            if lx + w > WIDTH - 10.0 && lx > left {
                (lx, row) = (left, row + 1);
            }
            placed.push((*name, lx, 36.0 + row as f64 * 18.0));
            lx += w;
        }
        let top = 40.0 + (row + 1) as f64 * 18.0 + 6.0;
        let (panel_h, gap) = (110.0, 44.0);
        let height = top + self.panels.len() as f64 * (panel_h + gap) + 30.0;
        let x = |t: f64| left + t / ticks as f64 * plot_w;

        let mut s = open(height, &self.title);
        for (name, lx, ly) in placed {
            let _ = writeln!(
                s,
                "<rect x=\"{lx}\" y=\"{ly}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
                 <text x=\"{}\" y=\"{}\">{}</text>",
                color(name),
                lx + 16.0,
                ly + 10.0,
                escape(name)
            );
        }
        for (i, panel) in self.panels.iter().enumerate() {
            let y0 = top + i as f64 * (panel_h + gap) + 18.0;
            let y = |v: f64| y0 + panel_h - v / y_max * panel_h;
            let _ = writeln!(
                s,
                "<text x=\"{left}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
                y0 - 6.0,
                escape(&panel.title)
            );
            for (t, _) in axis.ticks() {
                let gy = y(t);
                let _ = writeln!(
                    s,
                    "<line x1=\"{left}\" y1=\"{gy:.1}\" x2=\"{}\" y2=\"{gy:.1}\" \
                     stroke=\"#dddddd\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" \
                     fill=\"#333\">{}</text>",
                    left + plot_w,
                    left - 6.0,
                    gy + 4.0,
                    axis.tick_label(t)
                );
            }
            let step = nice_step(ticks as f64);
            let mut t = 0.0;
            while t <= ticks as f64 {
                let gx = x(t);
                let _ = writeln!(
                    s,
                    "<line x1=\"{gx:.1}\" y1=\"{y0:.1}\" x2=\"{gx:.1}\" y2=\"{:.1}\" \
                     stroke=\"#eeeeee\"/><text x=\"{gx:.1}\" y=\"{:.1}\" \
                     text-anchor=\"middle\" fill=\"#333\">{}</text>",
                    y0 + panel_h,
                    y0 + panel_h + 14.0,
                    int(t)
                );
                t += step;
            }
            let _ = writeln!(
                s,
                "<rect x=\"{left}\" y=\"{y0:.1}\" width=\"{plot_w}\" height=\"{panel_h}\" \
                 fill=\"none\" stroke=\"#333\"/>"
            );
            for line in &panel.lines {
                let mut points = String::new();
                for (k, v) in line.values.iter().enumerate() {
                    let _ = write!(
                        points,
                        "{:.1},{:.1} {:.1},{:.1} ",
                        x(k as f64),
                        y(*v),
                        x(k as f64 + 1.0),
                        y(*v)
                    );
                }
                let total: f64 = line.values.iter().sum();
                let _ = writeln!(
                    s,
                    "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" \
                     stroke-opacity=\"0.85\"><title>{}: {} in {} ticks</title></polyline>",
                    points.trim_end(),
                    color(&line.name),
                    escape(&line.name),
                    num(total),
                    line.values.len()
                );
            }
        }
        let _ = writeln!(
            s,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\
             <text x=\"14\" y=\"{:.1}\" text-anchor=\"middle\" \
             transform=\"rotate(-90 14 {:.1})\">{}</text>",
            left + plot_w / 2.0,
            height - 8.0,
            escape(&self.x_label),
            top + 80.0,
            top + 80.0,
            escape(&self.y_label)
        );
        s.push_str("</svg>\n");
        s
    }
}

/// The distributor experiment's interrupts per tick, one panel per case, over the last
/// [`PLOT_TICKS`] ticks of each trace: the study's Figures 9 and 10.
pub fn distributor_ticks(runs: &[Run]) -> Option<String> {
    let mut cases: Vec<&CaseRun> =
        runs.iter().filter_map(|r| r.distributor.as_ref()).filter(|d| d.trace.is_some()).collect();
    if cases.is_empty() {
        return None;
    }
    cases.sort_by_key(|d| d.case);
    let mut panels = Vec::new();
    for d in cases {
        let Some(trace) = &d.trace else { continue };
        let trace = trace.last(PLOT_TICKS);
        let name = catalog::case(d.case).map_or("", |c| c.name);
        let mbit = d.mbit_s.map_or("no result".to_owned(), |m| format!("{m:.1} Mb/s"));
        let series = |source: &str, cpu: usize| -> Vec<f64> {
            trace.series(source, cpu).into_iter().map(f64::from).collect()
        };
        let mut lines = vec![Line {
            name: format!("audio ({}, core {})", AUDIO_SOURCE, AUDIO_CPU),
            values: series(AUDIO_SOURCE, AUDIO_CPU),
        }];
        for cpu in trace.cpus_of(NET_SOURCE) {
            lines.push(Line {
                name: format!("network ({}), core {cpu}", NET_SOURCE),
                values: series(NET_SOURCE, cpu),
            });
        }
        panels.push(Panel { title: format!("Case {}: {name}, {mbit}", d.case), lines });
    }
    let chart = TickChart {
        title: "Interrupts per 10 ms tick (Figures 9 and 10 layout)".into(),
        x_label: format!(
            "tick (10 ms), the last {} of the trace taken during the transfer",
            PLOT_TICKS
        ),
        y_label: "interrupts injected per tick".into(),
        panels,
    };
    Some(chart.render())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps() {
        assert_eq!(nice_step(0.0), 1.0);
        assert_eq!(nice_step(6.0), 1.0);
        assert_eq!(nice_step(150.0), 50.0);
        assert_eq!(nice_step(1500.0), 500.0);
        assert_eq!(nice_step(1234.0), 500.0);
        assert_eq!(nice_step(700.0), 200.0);
    }

    #[test]
    fn axes() {
        let l = Axis::linear(0.0, 1234.0);
        assert_eq!(l, Axis::Linear { min: 0.0, max: 1500.0, step: 500.0 });
        assert_eq!(l.ticks().len(), 4);
        assert_eq!(l.frac(750.0), 0.5);
        let s = Axis::linear(-30.0, 120.0);
        assert_eq!(s, Axis::Linear { min: -50.0, max: 150.0, step: 50.0 });
        assert_eq!(s.frac(0.0), 0.25);
        assert_eq!(s.ticks().first(), Some(&(-50.0, true)));
        let g = Axis::log(11_511.0);
        assert_eq!(g, Axis::Log { decades: 5 });
        assert_eq!(g.frac(1000.0), 0.6);
        assert_eq!(g.frac(0.0), 0.0);
        let labelled: Vec<f64> = g.ticks().into_iter().filter(|t| t.1).map(|t| t.0).collect();
        assert_eq!(labelled, [1.0, 10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
        assert_eq!(Axis::log(2.0), Axis::Log { decades: 1 });
    }

    #[test]
    fn tick_labels() {
        let a = Axis::linear(0.0, 1.3);
        assert_eq!(a, Axis::Linear { min: 0.0, max: 1.5, step: 0.5 });
        let labels: Vec<String> = a.ticks().iter().map(|t| a.tick_label(t.0)).collect();
        assert_eq!(labels, ["0.0", "0.5", "1.0", "1.5"]);
        assert_eq!(Axis::linear(0.0, 0.3).tick_label(0.05), "0.05");
        assert_eq!(Axis::linear(0.0, 1234.0).tick_label(1000.0), "1,000");
        assert_eq!(Axis::log(100.0).tick_label(10.0), "10");
    }

    #[test]
    fn escapes() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }

    fn chart() -> Chart {
        Chart {
            title: "T & U".into(),
            x_label: "instructions".into(),
            categories: vec!["Hypercall".into(), "VM Switch".into()],
            series: vec!["default".into(), "eager-fp".into()],
            values: vec![vec![Some(96.0), Some(96.0)], vec![Some(1024.0), None]],
            stacked: false,
            log: false,
            signed: false,
            markers: vec![Some((150.0, "target: at most 150".into())), None],
            marker_label: "target".into(),
            decimals: None,
        }
    }

    #[test]
    fn renders_grouped_and_stacked() {
        let mut c = chart();
        let svg = c.render();
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("T &amp; U"));
        assert!(svg.contains(">1,024</text>"));
        assert!(svg.contains("not measured"));
        assert!(svg.contains(">target</text>"));
        assert_eq!(svg.matches("<rect x=").count(), 3 + 2, "3 bars and 2 legend boxes");
        c.log = true;
        assert!(c.render().contains(">1,000</text>"), "a power-of-ten tick");
        c.stacked = true;
        let svg = c.render();
        assert!(svg.contains(">192</text>"), "the stacked total");
    }

    #[test]
    fn renders_signed_differences() {
        let mut c = chart();
        c.signed = true;
        c.values = vec![vec![Some(120.0), Some(-30.0)], vec![Some(0.0), None]];
        let svg = c.render();
        assert!(svg.contains(">+120</text>"));
        assert!(svg.contains("text-anchor=\"end\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">-30</text>"));
        assert!(svg.contains(">-50</text>"), "the axis reaches below zero");
    }
}
