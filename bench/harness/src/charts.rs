//! The report's charts, drawn by plotters' SVG backend. Every figure is one of two kinds: a
//! horizontal bar chart ([`Bars`]: a row per category, long benchmark names reading well on
//! the left) or step lines over time in stacked panels ([`Lines`]).

use crate::catalog::{
    self, AUDIO_CPU, AUDIO_SOURCE, CASES, DEFAULT_VARIANT, GICV2, NET_SOURCE, STATE_CLASSES, Target,
};
use crate::model::{CaseRun, Results, Run};
use crate::numbers::{int, num};
use crate::table1;
use anyhow::Result;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Ticks shown in the figure, as in the study's Figures 9 and 10 (1.5 s).
pub const PLOT_TICKS: usize = 150;

const WIDTH: u32 = 900;
const FONT: &str = "sans-serif";
/// Okabe-Ito: distinguishable with the common colour-vision deficiencies.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0x00, 0x72, 0xB2),
    RGBColor(0xE6, 0x9F, 0x00),
    RGBColor(0x00, 0x9E, 0x73),
    RGBColor(0xCC, 0x79, 0xA7),
    RGBColor(0x56, 0xB4, 0xE9),
    RGBColor(0xD5, 0x5E, 0x00),
    RGBColor(0xF0, 0xE4, 0x42),
    RGBColor(0x99, 0x99, 0x99),
];
const MARKER: RGBColor = RGBColor(0xC0, 0x00, 0x00);
/// Rough width of a character of the labels, for the layout.
const CHAR_W: u32 = 7;
/// Pixels per bar, and between the categories' groups of bars.
const BAR_H: u32 = 16;
const GAP: u32 = 14;

fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

fn text(size: u32) -> TextStyle<'static> {
    (FONT, size).into_font().color(&BLACK)
}

fn bold(size: u32) -> TextStyle<'static> {
    (FONT, size, FontStyle::Bold).into_font().color(&BLACK)
}

/// A legend entry's key: a series' colour, or the dashed marker line.
enum Key {
    Fill(RGBColor),
    Dashed,
}

/// Draws legend entries left to right in `area`, wrapped to its width; the height they take
/// is [`legend_height`].
fn legend(area: &DrawingArea<SVGBackend, Shift>, entries: &[(String, Key)]) -> Result<()> {
    for ((name, key), x, y) in legend_layout(entries) {
        match key {
            Key::Fill(c) => area.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], c.filled()))?,
            Key::Dashed => area.draw(&DashedPathElement::new(
                [(x, y + 6), (x + 12, y + 6)],
                4,
                3,
                MARKER.stroke_width(2),
            ))?,
        }
        area.draw_text(name, &text(15), (x + 16, y))?;
    }
    Ok(())
}

/// Where each entry goes: (entry, x, y).
fn legend_layout(entries: &[(String, Key)]) -> Vec<(&(String, Key), i32, i32)> {
    let (mut x, mut row) = (10, 0);
    let mut out = Vec::new();
    for e in entries {
        let w = 16 + e.0.chars().count() as u32 * CHAR_W + 18;
        if x + w > WIDTH - 10 && x > 10 {
            (x, row) = (10, row + 1);
        }
        out.push((e, x as i32, 4 + row * 18));
        x += w;
    }
    out
}

fn legend_height(entries: &[(String, Key)]) -> u32 {
    legend_layout(entries).last().map_or(0, |(.., y)| *y as u32 + 22)
}

/// `lo..hi` (and 0) widened to multiples of a step of 1, 2 or 5 times a power of ten, so that
/// a negative side gets ticks of its own.
fn nice_range(lo: f64, hi: f64) -> (f64, f64) {
    let (lo, hi) = (lo.min(0.0), hi.max(0.0));
    if hi <= lo {
        return (0.0, 1.0);
    }
    let rough = (hi - lo) / 6.0;
    let mag = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * mag).find(|s| *s >= rough);
    let step = step.unwrap_or(10.0 * mag);
    ((lo / step).floor() * step, ((hi / step).ceil() * step).max(lo + step))
}

/// A tick label: an integer, or the few decimals a fractional step needs.
fn tick(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        int(v)
    } else {
        format!("{v:.3}").trim_end_matches('0').to_owned()
    }
}

/// A horizontal bar chart: per category one bar per series, or the series stacked in one.
pub struct Bars {
    pub title: String,
    pub x_label: String,
    pub categories: Vec<String>,
    pub series: Vec<String>,
    /// `values[category][series]`; `None` draws "not measured".
    pub values: Vec<Vec<Option<f64>>>,
    pub stacked: bool,
    /// A logarithmic axis, for figures spanning orders of magnitude (values below 1 sit at 1).
    pub log: bool,
    /// Per category: a reference value drawn as a dashed line; and its legend entry.
    pub markers: Vec<Option<f64>>,
    pub marker_label: String,
    /// How a value is written at its bar.
    pub label: fn(f64) -> String,
}

impl Default for Bars {
    fn default() -> Self {
        Self {
            title: String::new(),
            x_label: String::new(),
            categories: Vec::new(),
            series: Vec::new(),
            values: Vec::new(),
            stacked: false,
            log: false,
            markers: Vec::new(),
            marker_label: String::new(),
            label: num,
        }
    }
}

impl Bars {
    pub fn render(&self) -> Result<String> {
        let rows = self.categories.len();
        let per_row = if self.stacked { 1 } else { self.series.len().max(1) };
        let band = per_row as u32 * BAR_H + GAP;
        let has_markers = self.markers.iter().any(Option::is_some);
        let mut keys: Vec<(String, Key)> = Vec::new();
        if self.series.len() > 1 || has_markers {
            keys.extend(
                self.series.iter().enumerate().map(|(i, s)| (s.clone(), Key::Fill(color(i)))),
            );
        }
        if has_markers {
            keys.push((self.marker_label.clone(), Key::Dashed));
        }
        let legend_h = legend_height(&keys);
        let height = 40 + legend_h + rows as u32 * band + 60;
        let label_w = self.categories.iter().map(|c| c.chars().count()).max().unwrap_or(0) as u32
            * CHAR_W
            + 16;

        // The axis: log10 of the values on a log chart, so that both kinds share one.
        let x = |v: f64| if self.log { v.max(1.0).log10() } else { v };
        let ends = self.values.iter().flat_map(|vals| {
            let vals = vals.iter().flatten().copied();
            if self.stacked { vec![vals.filter(|v| *v > 0.0).sum()] } else { vals.collect() }
        });
        let (lo, hi) = ends
            .chain(self.markers.iter().flatten().copied())
            .fold((0.0, 0.0), |(lo, hi), v| (f64::min(lo, x(v)), f64::max(hi, x(v))));
        let (lo, hi, labels) = if self.log {
            let decades = hi.ceil().max(1.0);
            (0.0, decades, decades as usize + 1)
        } else {
            // Headroom, so that a bar or marker at a round number is not on the frame.
            let (lo, hi) = nice_range(lo * 1.04, hi * 1.04);
            (lo, hi, 8)
        };
        let n = rows as f64;
        let unit = 1.0 / f64::from(band);

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE)?;
            let root = root.titled(&self.title, text(20))?;
            let (top, plot) = root.split_vertically(legend_h);
            legend(&top, &keys)?;
            let mut chart = ChartBuilder::on(&plot)
                .margin_right(70)
                .margin_left(10)
                .x_label_area_size(45)
                .y_label_area_size(label_w)
                .build_cartesian_2d(lo..hi, 0.0..n)?;
            let x_label = |v: &f64| if self.log { int(10f64.powf(*v)) } else { tick(*v) };
            chart
                .configure_mesh()
                .disable_y_mesh()
                // Light lines at linear steps would mislead on the log axis.
                .max_light_lines(if self.log { 0 } else { 1 })
                .x_labels(labels)
                .y_labels(0)
                .x_label_formatter(&x_label)
                .x_desc(&self.x_label)
                .label_style(text(15))
                .axis_desc_style(text(15))
                .draw()?;
            // Bars start at 0, or at 1 on a log axis, whose position is log10(1) = 0.
            let origin = 0.0;
            let value_label = |v: f64, at: f64, y: f64, bold: bool| {
                let (pos, dx) = if at < origin { (HPos::Right, -4) } else { (HPos::Left, 4) };
                let style = if bold { self::bold(15) } else { text(15) };
                let style = style.pos(Pos::new(pos, VPos::Center));
                EmptyElement::at((at, y)) + Text::new((self.label)(v), (dx, 0), style)
            };
            let right = text(15).pos(Pos::new(HPos::Right, VPos::Center));
            for (c, name) in self.categories.iter().enumerate() {
                let at = EmptyElement::at((lo, n - c as f64 - 0.5));
                chart.draw_series([at + Text::new(name.clone(), (-8, 0), right.clone())])?;
            }
            for (c, vals) in self.values.iter().enumerate() {
                let band_top = n - c as f64;
                let bar = |i: usize| {
                    let y0 = band_top - f64::from(GAP / 2 + i as u32 * BAR_H) * unit;
                    (y0, y0 - f64::from(BAR_H - 2) * unit)
                };
                if self.stacked {
                    let (y0, y1) = bar(0);
                    let mut acc = 0.0;
                    for (i, v) in vals.iter().enumerate() {
                        let Some(v) = v.filter(|v| *v > 0.0) else { continue };
                        let rect = [(x(acc), y0), (x(acc + v), y1)];
                        chart.draw_series([Rectangle::new(rect, color(i).filled())])?;
                        acc += v;
                    }
                    chart.draw_series([value_label(acc, x(acc), (y0 + y1) / 2.0, true)])?;
                    continue;
                }
                for (i, v) in vals.iter().enumerate() {
                    let (y0, y1) = bar(i);
                    let mid = (y0 + y1) / 2.0;
                    match *v {
                        Some(v) => {
                            let rect = [(origin, y0), (x(v), y1)];
                            chart.draw_series([Rectangle::new(rect, color(i).filled())])?;
                            chart.draw_series([value_label(v, x(v), mid, false)])?;
                        }
                        None => {
                            let style = text(15).color(&RGBColor(0x88, 0x88, 0x88));
                            let style = style.pos(Pos::new(HPos::Left, VPos::Center));
                            chart.draw_series([EmptyElement::at((origin, mid))
                                + Text::new("not measured", (4, 0), style)])?;
                        }
                    }
                }
            }
            for (c, m) in self.markers.iter().enumerate() {
                let Some(m) = *m else { continue };
                let band_top = n - c as f64;
                let ends = [(x(m), band_top - 3.0 * unit), (x(m), band_top - 1.0 + 5.0 * unit)];
                chart.draw_series([DashedPathElement::new(ends, 4, 3, MARKER.stroke_width(2))])?;
            }
            root.present()?;
        }
        Ok(svg)
    }
}

/// One panel of [`Lines`]: a title and its series, a value per tick each.
pub struct Panel {
    pub title: String,
    pub lines: Vec<(String, Vec<f64>)>,
}

/// Small multiples over time: a panel per case, ticks along x, a step line per series, one y
/// scale for all panels; a series keeps its colour (by name) in every panel.
pub struct Lines {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub panels: Vec<Panel>,
}

impl Lines {
    pub fn render(&self) -> Result<String> {
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in self.panels.iter().flat_map(|p| &p.lines) {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        let keys: Vec<(String, Key)> =
            names.iter().enumerate().map(|(i, n)| (n.to_string(), Key::Fill(color(i)))).collect();
        let all = || self.panels.iter().flat_map(|p| &p.lines);
        let ticks = all().map(|(_, v)| v.len()).max().unwrap_or(0).max(1) as f64;
        let hi = all().flat_map(|(_, v)| v.iter().copied()).fold(1.0, f64::max) * 1.1;
        let legend_h = legend_height(&keys);
        let panel_h = 150;
        let height = 40 + legend_h + self.panels.len() as u32 * panel_h + 30;

        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
            root.fill(&WHITE)?;
            let root = root.titled(&self.title, text(20))?;
            let (top, rest) = root.split_vertically(legend_h);
            legend(&top, &keys)?;
            let (plots, foot) = rest.split_vertically(self.panels.len() as u32 * panel_h);
            let centre = text(15).pos(Pos::new(HPos::Center, VPos::Top));
            foot.draw_text(&self.x_label, &centre, (WIDTH as i32 / 2, 6))?;
            for (area, panel) in plots.split_evenly((self.panels.len(), 1)).iter().zip(&self.panels)
            {
                let mut chart = ChartBuilder::on(area)
                    .caption(&panel.title, bold(15))
                    .margin_right(20)
                    .margin_left(10)
                    .x_label_area_size(20)
                    .y_label_area_size(55)
                    .build_cartesian_2d(0.0..ticks, 0.0..hi)?;
                chart
                    .configure_mesh()
                    .max_light_lines(1)
                    .x_label_formatter(&|t| int(*t))
                    .y_label_formatter(&|v| tick(*v))
                    .y_desc(&self.y_label)
                    .label_style(text(13))
                    .axis_desc_style(text(13))
                    .draw()?;
                for (name, values) in &panel.lines {
                    let i = names.iter().position(|n| n == name).unwrap_or(0);
                    let steps = values
                        .iter()
                        .enumerate()
                        .flat_map(|(k, v)| [(k as f64, *v), (k as f64 + 1.0, *v)]);
                    chart.draw_series(LineSeries::new(steps, color(i).stroke_width(2)))?;
                }
            }
            root.present()?;
        }
        Ok(svg)
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

fn signed(v: f64) -> String {
    if v > 0.0 { format!("+{}", num(v)) } else { num(v) }
}

fn two_decimals(v: f64) -> String {
    format!("{v:.2}")
}

/// Median instructions of the default build, with target markers; log scale, since the
/// figures span from a few instructions (IRQ completion) to thousands. With a GICv2 run that
/// has figures, a bar for each GIC per benchmark.
pub fn micro(r: &Results) -> Result<Option<String>> {
    let Some(run) = r.micro() else { return Ok(None) };
    let v2 = r.micro_on(GICV2).filter(|v2| !v2.figures.is_empty());
    let mut names = bench_names(run);
    for name in v2.map(bench_names).unwrap_or_default() {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    if names.is_empty() {
        return Ok(None);
    }
    let target = |n: &String| match catalog::bench(n)?.target? {
        Target::AtMost(v) | Target::Below(v) => Some(v),
        Target::NoExits => None,
    };
    // The targets are the suite's, GICv3's.
    let (title, series, marker_label) = match v2 {
        Some(_) => (
            "armhv microbenchmarks: median path length, GICv3 and GICv2",
            vec!["GICv3".into(), "GICv2".into()],
            "target (GICv3)",
        ),
        None => ("armhv microbenchmarks: median path length", vec!["median".into()], "target"),
    };
    let values = names
        .iter()
        .map(|n| {
            let mut v = vec![run.figure(n).map(|f| f.median)];
            if let Some(v2) = v2 {
                v.push(v2.figure(n).map(|f| f.median));
            }
            v
        })
        .collect();
    Bars {
        title: title.into(),
        x_label: format!("instructions, log scale (under icount, {}; lower is better)", r.meta.cpu),
        categories: names.iter().map(|n| catalog::row(n).to_owned()).collect(),
        series,
        values,
        log: true,
        markers: names.iter().map(target).collect(),
        marker_label: marker_label.into(),
        ..Bars::default()
    }
    .render()
    .map(Some)
}

/// The world-switch breakdown: one stacked bar per path.
pub fn breakdown(r: &Results) -> Result<Option<String>> {
    let paths = r.breakdown();
    if paths.is_empty() {
        return Ok(None);
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
    Bars {
        title: "World-switch breakdown by state class (Table III)".into(),
        x_label: "mean instructions per event (under icount)".into(),
        categories: paths.iter().map(|p| catalog::path_label(&p.path).to_owned()).collect(),
        series: classes.iter().map(|c| catalog::class_label(c).to_owned()).collect(),
        values: paths.iter().map(|p| classes.iter().map(|c| p.class(c)).collect()).collect(),
        stacked: true,
        ..Bars::default()
    }
    .render()
    .map(Some)
}

/// The ablations: with the default run, what each design change costs per benchmark (the
/// ablation's median minus the default's, linear); without it, the medians (log).
pub fn ablations(r: &Results) -> Result<Option<String>> {
    let runs: Vec<&Run> = r.ablations().collect();
    if runs.is_empty() {
        return Ok(None);
    }
    let series = runs.iter().map(|r| r.variant.clone()).collect();
    let chart = match r.micro() {
        Some(default) => {
            let names = bench_names(default);
            Bars {
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
                label: signed,
                ..Bars::default()
            }
        }
        None => {
            let names = bench_names(runs[0]);
            Bars {
                title: "Design ablations: median path length per variant".into(),
                x_label: "instructions, log scale (under icount; lower is better)".into(),
                categories: names.iter().map(|n| catalog::row(n).to_owned()).collect(),
                series,
                values: names
                    .iter()
                    .map(|n| runs.iter().map(|r| r.figure(n).map(|f| f.median)).collect())
                    .collect(),
                log: true,
                ..Bars::default()
            }
        }
    };
    chart.render().map(Some)
}

/// The application workloads: armhv's figure normalized to native's, with native (1.00)
/// marked on every row, as in the study's figure.
pub fn workloads(r: &Results) -> Result<Option<String>> {
    let rows: Vec<_> = r.workloads.iter().filter(|s| s.normalized.is_some()).collect();
    if rows.is_empty() {
        return Ok(None);
    }
    Bars {
        title: "Application workloads under armhv, normalized to native".into(),
        x_label: "armhv time or instructions / native, or native throughput / armhv (1.00 = no \
                  overhead)"
            .into(),
        categories: rows
            .iter()
            .map(|s| {
                catalog::workload(&s.workload).map_or(s.workload.clone(), |w| {
                    if w.reach == catalog::Reach::Peer {
                        format!("{} *", w.row)
                    } else {
                        w.row.to_owned()
                    }
                })
            })
            .collect(),
        series: vec!["median".into(), "best of n".into()],
        values: rows.iter().map(|s| vec![s.normalized, s.normalized_best]).collect(),
        markers: rows.iter().map(|_| Some(1.0)).collect(),
        marker_label: "native = 1.00 (* network: native over loopback)".into(),
        label: two_decimals,
        ..Bars::default()
    }
    .render()
    .map(Some)
}

/// The real-I/O workloads normalized to native as in [`workloads`], each with its target as
/// the most overhead it may show (the dashed line).
pub fn real_io(r: &Results) -> Result<Option<String>> {
    let rows: Vec<_> = r
        .workloads
        .iter()
        .filter(|s| s.normalized.is_some())
        .filter_map(|s| Some((s, catalog::workload(&s.workload)?.goal?)))
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    Bars {
        title: "Real I/O under armhv against native, with the targets".into(),
        x_label: "armhv instructions per MiB or per round trip / native (1.00 = no overhead)"
            .into(),
        categories: rows
            .iter()
            .map(|(s, _)| {
                catalog::workload(&s.workload).map_or(s.workload.clone(), |w| w.row.into())
            })
            .collect(),
        series: vec!["median".into(), "best of n".into()],
        values: rows.iter().map(|(s, _)| vec![s.normalized, s.normalized_best]).collect(),
        markers: rows.iter().map(|(_, g)| Some(g.max_normalized())).collect(),
        marker_label: "target: at most this overhead".into(),
        label: two_decimals,
        ..Bars::default()
    }
    .render()
    .map(Some)
}

/// The distributor experiment's bandwidth per case relative to case 1, measured and the
/// study's (the absolute figures are the table's: TCG's and an ARM11's do not compare).
pub fn distributor_bandwidth(runs: &[Run]) -> Result<Option<String>> {
    let rows = table1::rows(runs);
    if rows.iter().all(|r| r.relative.is_none()) {
        return Ok(None);
    }
    let base = CASES[0].study_mbit;
    Bars {
        title: "Interrupt distributor (Table 1): bandwidth relative to case 1".into(),
        x_label: "iperf3 bandwidth into the general-purpose VM / case 1's (no audio)".into(),
        categories: rows
            .iter()
            .map(|r| format!("{} {} (net: {})", r.case.number, r.case.name, r.network_cores))
            .collect(),
        series: vec!["armhv (measured)".into(), "study (ARM11 MPCore)".into()],
        values: rows
            .iter()
            .map(|r| vec![r.relative.map(|s| s.median), Some(r.case.study_mbit / base)])
            .collect(),
        label: two_decimals,
        ..Bars::default()
    }
    .render()
    .map(Some)
}

/// The distributor experiment's interrupts per tick, one panel per case (its median run), over
/// the last [`PLOT_TICKS`] ticks of each trace: the study's Figures 9 and 10.
pub fn distributor_ticks(runs: &[Run]) -> Result<Option<String>> {
    let cases: Vec<&CaseRun> = table1::by_case(runs)
        .into_iter()
        .map(|(_, _, m)| m)
        .filter(|d| d.trace.is_some())
        .collect();
    if cases.is_empty() {
        return Ok(None);
    }
    let mut panels = Vec::new();
    for d in cases {
        let Some(trace) = &d.trace else { continue };
        let trace = trace.last(PLOT_TICKS);
        let name = catalog::case(d.case).map_or("", |c| c.name);
        let mbit = d.mbit_s.map_or("no result".to_owned(), |m| format!("{m:.1} Mb/s"));
        let series = |source: &str, cpu: usize| -> Vec<f64> {
            trace.series(source, cpu).into_iter().map(f64::from).collect()
        };
        let mut lines = vec![(
            format!("audio ({AUDIO_SOURCE}, core {AUDIO_CPU})"),
            series(AUDIO_SOURCE, AUDIO_CPU),
        )];
        for cpu in trace.cpus_of(NET_SOURCE) {
            lines.push((format!("network ({NET_SOURCE}), core {cpu}"), series(NET_SOURCE, cpu)));
        }
        panels.push(Panel { title: format!("Case {}: {name}, {mbit}", d.case), lines });
    }
    Lines {
        title: "Interrupts per 10 ms tick (Figures 9 and 10 layout)".into(),
        x_label: format!(
            "tick (10 ms), the last {PLOT_TICKS} of the trace taken during the transfer"
        ),
        y_label: "interrupts per tick".into(),
        panels,
    }
    .render()
    .map(Some)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The text of a chart's labels, legend and titles.
    pub(crate) fn labels(svg: &str) -> Vec<&str> {
        svg.split("</text>").filter_map(|t| Some(t.rsplit_once('>')?.1.trim())).collect()
    }

    /// A colour as the SVG backend writes it.
    fn hex(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    fn bars() -> Bars {
        Bars {
            title: "T & U".into(),
            x_label: "instructions".into(),
            categories: vec!["Hypercall".into(), "VM Switch".into()],
            series: vec!["default".into(), "eager-fp".into()],
            values: vec![vec![Some(96.0), Some(96.0)], vec![Some(1024.0), None]],
            stacked: false,
            log: false,
            markers: vec![Some(150.0), None],
            marker_label: "target".into(),
            label: num,
        }
    }

    #[test]
    fn bars_grouped_log_and_stacked() {
        let mut b = bars();
        let svg = b.render().unwrap();
        assert!(svg.starts_with("<svg ") && svg.trim_end().ends_with("</svg>"));
        let l = labels(&svg);
        for want in ["T &amp; U", "Hypercall", "VM Switch", "96", "1,024", "not measured"] {
            assert!(l.contains(&want), "{want:?} not in {l:?}");
        }
        assert!(l.contains(&"default") && l.contains(&"eager-fp") && l.contains(&"target"));
        let fills = |svg: &str| {
            svg.matches(&format!("fill=\"{}\"", hex(PALETTE[0]))).count()
                + svg.matches(&format!("fill=\"{}\"", hex(PALETTE[1]))).count()
        };
        assert_eq!(fills(&svg), 3 + 2, "3 bars and 2 legend keys");
        assert!(svg.contains(&hex(MARKER)), "the target's dashed line");
        b.log = true;
        let svg = b.render().unwrap();
        assert!(labels(&svg).contains(&"1,000"), "a power of ten on the axis");
        b.stacked = true;
        let svg = b.render().unwrap();
        assert!(labels(&svg).contains(&"192"), "the stacked total");
        assert_eq!(fills(&svg), 3 + 2, "3 segments and 2 legend keys");
    }

    #[test]
    fn bars_of_signed_differences() {
        let mut b = bars();
        b.values = vec![vec![Some(120.0), Some(-30.0)], vec![Some(0.0), None]];
        b.label = |v| if v > 0.0 { format!("+{}", num(v)) } else { num(v) };
        let svg = b.render().unwrap();
        let l = labels(&svg);
        assert!(l.contains(&"+120") && l.contains(&"-30"), "{l:?}");
        // The axis reaches below zero, and a negative value is written left of its bar.
        assert!(l.iter().any(|t| t.starts_with('-') && *t != "-30"), "{l:?}");
        let minus = svg.split("</text>").find(|t| t.trim_end().ends_with("-30")).unwrap();
        assert!(minus.contains("text-anchor=\"end\""), "{minus}");
    }

    #[test]
    fn lines_keep_a_colour_per_series() {
        let panel = |title: &str, second: &str| Panel {
            title: title.into(),
            lines: vec![("audio".into(), vec![3.0, 4.0, 3.0]), (second.into(), vec![1.0; 3])],
        };
        let chart = Lines {
            title: "Interrupts".into(),
            x_label: "tick".into(),
            y_label: "per tick".into(),
            panels: vec![panel("Case 1", "net core 0"), panel("Case 3", "net core 1")],
        };
        let svg = chart.render().unwrap();
        let l = labels(&svg);
        for want in ["Interrupts", "Case 1", "Case 3", "audio", "net core 0", "net core 1"] {
            assert!(l.contains(&want), "{want:?} not in {l:?}");
        }
        let strokes: Vec<&str> = svg
            .split("<polyline")
            .filter(|p| p.contains("stroke-width=\"2\""))
            .map(|p| p.split("stroke=\"").nth(1).unwrap().split('"').next().unwrap())
            .collect();
        let hex: Vec<String> = (0..3).map(|i| hex(color(i))).collect();
        assert_eq!(strokes, [&hex[0], &hex[1], &hex[0], &hex[2]]);
    }

    #[test]
    fn ranges() {
        assert_eq!(nice_range(0.0, 1234.0), (0.0, 1500.0));
        assert_eq!(nice_range(-30.0, 120.0), (-50.0, 150.0));
        assert_eq!(nice_range(0.0, 1.3), (0.0, 1.5));
        assert_eq!(nice_range(0.0, 0.0), (0.0, 1.0));
    }

    #[test]
    fn tick_labels() {
        assert_eq!(tick(0.0), "0");
        assert_eq!(tick(1000.0), "1,000");
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(-20.0), "-20");
    }
}
