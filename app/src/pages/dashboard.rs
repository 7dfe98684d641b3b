//! The live dashboard: the answering instance's figures second by second, drawn with
//! inline SVG. The server renders the last minute of frames it kept; in the browser the
//! page then follows `GET /admin/api/dashboard/stream` with an `EventSource`, keeping the
//! last five minutes in memory. A second without a frame is drawn as a gap (no line across
//! it), and while the stream is down a notice says it is reconnecting.

use super::error_box;
use crate::api::dashboard_frames;
use contract::{DashboardFrame, StageFigures};
use leptos::prelude::*;
use std::collections::BTreeMap;

/// Frames kept in memory: five minutes at one a second.
// The server only renders what it kept; the browser adds the stream's frames.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const KEPT: usize = 300;
/// Frames further apart than this have a gap between them.
const GAP_MS: i64 = 1_500;
/// The funnel bars sum this many recent frames.
const FUNNEL_FRAMES: usize = 60;
/// The charts' drawing area, in SVG units.
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;

/// The stream's state as the page knows it (the server only ever renders `Connecting`).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// Not opened yet (the server's rendering), or opening.
    Connecting,
    Live,
    /// Dropped: the browser retries on its own.
    Reconnecting,
    /// Refused (the session ended, or the server answered an error): reload to retry.
    Closed,
}

impl Link {
    fn as_str(self) -> &'static str {
        match self {
            Link::Connecting => "connecting",
            Link::Live => "live",
            Link::Reconnecting => "reconnecting",
            Link::Closed => "closed",
        }
    }
}

#[component]
pub fn Dashboard() -> impl IntoView {
    let recent = Resource::new(|| (), |_| dashboard_frames());
    view! {
        <h1>"Live dashboard"</h1>
        <p class="meta">
            "What this instance sees, second by second: the buy funnel, buy requests per second "
            "and their p99, the stock of every live item, the order pipeline's backlog, the "
            "database pool, the instances and the switches in force."
        </p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match recent.await {
                    Ok(frames) => view! { <Live frames/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Suspense>
    }
}

/// Adds a frame from the stream: frames already shown (the backlog sent again after a
/// reconnect) are skipped; frames of another instance (the load balancer moved the
/// stream) start the history over.
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn keep(frames: &mut Vec<DashboardFrame>, frame: DashboardFrame) {
    match frames.last() {
        Some(last) if last.node_id != frame.node_id => frames.clear(),
        Some(last) if last.at_ms >= frame.at_ms => return,
        _ => {}
    }
    frames.push(frame);
    if frames.len() > KEPT {
        let extra = frames.len() - KEPT;
        frames.drain(..extra);
    }
}

#[component]
fn Live(frames: Vec<DashboardFrame>) -> impl IntoView {
    let frames = RwSignal::new(frames);
    let link = RwSignal::new(Link::Connecting);
    #[cfg(feature = "hydrate")]
    stream::follow(frames, link);
    view! {
        <div id="dashboard" data-link=move || link.get().as_str()>
            {move || match link.get() {
                Link::Reconnecting => view! {
                    <p class="notice" role="status">"The live stream dropped: reconnecting…"</p>
                }.into_any(),
                Link::Closed => view! {
                    <p class="error" role="alert">"The live stream was refused: reload the page (sign in again if the session ended)."</p>
                }.into_any(),
                Link::Connecting | Link::Live => ().into_any(),
            }}
            {move || frames.with(|frames| draw(frames))}
        </div>
    }
}

fn draw(frames: &[DashboardFrame]) -> AnyView {
    let Some(last) = frames.last() else {
        return view! { <p class="empty">"No frame yet: the first arrives within a second."</p> }
            .into_any();
    };
    let qps: Vec<(i64, Option<f64>)> = frames
        .iter()
        .map(|frame| (frame.at_ms, Some(frame.buy.requests as f64)))
        .collect();
    let p99: Vec<(i64, Option<f64>)> = frames
        .iter()
        .map(|frame| (frame.at_ms, frame.buy.p99_ms))
        .collect();
    let recent = &frames[frames.len().saturating_sub(FUNNEL_FRAMES)..];
    view! {
        <p class="meta">
            "Instance " <code>{last.node_id.clone()}</code> " · " {frames.len()} " s of history"
        </p>
        <h2>"Funnel (last " {recent.len()} " s)"</h2>
        {funnel(recent)}
        <div class="charts">
            {chart("chart-qps", "Buy requests per second", "req/s", frames, &qps)}
            {chart("chart-p99", "Buy p99 latency", "ms", frames, &p99)}
        </div>
        <h2>"Against the baseline"</h2>
        {against_baseline(last)}
        <h2>"Stock of live items"</h2>
        {stock(frames)}
        <h2>"Pipeline, pool and admission"</h2>
        {levels(last)}
        <h2>"Instances"</h2>
        {instances(last)}
        <h2>"Switches in force"</h2>
        {switches(last)}
    }
    .into_any()
}

/// One bar per stage, as long as the requests that reached it, split into passed and
/// stopped (the drop at that stage), with the stop codes beside it.
fn funnel(frames: &[DashboardFrame]) -> AnyView {
    let mut order: Vec<String> = Vec::new();
    let mut summed: BTreeMap<String, StageFigures> = BTreeMap::new();
    for stage in frames.iter().flat_map(|frame| &frame.funnel) {
        let entry = summed.entry(stage.stage.clone()).or_insert_with(|| {
            order.push(stage.stage.clone());
            StageFigures {
                stage: stage.stage.clone(),
                passed: 0,
                stopped: BTreeMap::new(),
            }
        });
        entry.passed += stage.passed;
        for (code, count) in &stage.stopped {
            *entry.stopped.entry(code.clone()).or_default() += count;
        }
    }
    let stages: Vec<StageFigures> = order
        .iter()
        .filter_map(|name| summed.remove(name))
        .filter(|stage| stage.total() > 0)
        .collect();
    if stages.is_empty() {
        return view! { <p class="empty" id="funnel">"No buy request in this window."</p> }
            .into_any();
    }
    let widest = stages
        .iter()
        .map(StageFigures::total)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    // Each stage on two lines: its name and figures, then its bar across the whole width,
    // so no label is cut off however long; the refusal codes are listed under the chart.
    let row = 34.0;
    let bar_room = WIDTH - 4.0;
    let height = row * stages.len() as f64;
    let mut codes_by_stage = Vec::new();
    let rows = stages
        .into_iter()
        .enumerate()
        .map(|(index, stage)| {
            let y = index as f64 * row;
            let stopped: u64 = stage.stopped.values().sum();
            let passed_width = bar_room * stage.passed as f64 / widest;
            let stopped_width = bar_room * stopped as f64 / widest;
            let codes = stage
                .stopped
                .iter()
                .filter(|(_, count)| **count > 0)
                .map(|(code, count)| format!("{code} {count}"))
                .collect::<Vec<_>>()
                .join(", ");
            let note = if stopped > 0 {
                codes_by_stage.push((stage.stage.clone(), codes));
                format!("{}: {} passed, {stopped} stopped", stage.stage, stage.passed)
            } else {
                format!("{}: {} passed", stage.stage, stage.passed)
            };
            view! {
                <g data-stage=stage.stage.clone() data-passed=stage.passed data-stopped=stopped>
                    <text x="0" y=y + 12.0 class="axis">{note}</text>
                    <rect x="0" y=y + 16.0 width=passed_width height=row - 22.0 class="bar-pass"></rect>
                    <rect x=passed_width y=y + 16.0 width=stopped_width height=row - 22.0 class="bar-stop"></rect>
                </g>
            }
        })
        .collect_view();
    view! {
        <svg id="funnel" class="chart" viewBox=format!("0 0 {WIDTH} {height}") role="img" aria-label="Buy funnel by stage: requests passed (green) and stopped (red)">
            {rows}
        </svg>
        {(!codes_by_stage.is_empty()).then(|| view! {
            <dl class="facts funnel-codes">
                {codes_by_stage.into_iter().map(|(stage, codes)| view! {
                    <dt>{stage} " stopped"</dt><dd class="mono">{codes}</dd>
                }).collect_view()}
            </dl>
        })}
    }
    .into_any()
}

/// The axes of a time chart, in HTML beside the drawing (a stretched SVG would stretch its
/// text): the value at the top and at the bottom, with the unit, and the times of the left and
/// right edges (UTC).
fn axes(top: f64, unit: &str, start: i64, span: i64, drawing: AnyView) -> AnyView {
    let clock = |ms: i64| {
        chrono::DateTime::from_timestamp_millis(ms)
            .map(|at| at.format("%H:%M:%S").to_string())
            .unwrap_or_default()
    };
    view! {
        <div class="plot">
            <div class="y-axis" aria-hidden="true">
                <span>{format!("{top:.1} {unit}")}</span>
                <span>{format!("0 {unit}")}</span>
            </div>
            {drawing}
            <span></span>
            <div class="x-axis" aria-hidden="true">
                <span>{clock(start)}</span>
                <span>{format!("{} UTC · {} s", clock(start + span), span / 1000)}</span>
            </div>
        </div>
    }
    .into_any()
}

/// The points of a series as polylines, broken wherever seconds are missing (or the
/// value is absent), scaled into the chart over the frames' time span.
fn segments(points: &[(i64, Option<f64>)], start: i64, span: i64, top: f64) -> Vec<String> {
    let mut lines = Vec::new();
    let mut current: Vec<String> = Vec::new();
    let mut previous: Option<i64> = None;
    for &(at, value) in points {
        let broken = previous.is_some_and(|before| at - before > GAP_MS);
        if broken || value.is_none() {
            if current.len() > 1 {
                lines.push(current.join(" "));
            } else if current.len() == 1 {
                // A lone second still shows, as a dot-sized segment.
                lines.push(format!("{0} {0}", current[0]));
            }
            current.clear();
        }
        if let Some(value) = value {
            let x = WIDTH * (at - start) as f64 / span as f64;
            let y = HEIGHT - HEIGHT * (value / top).min(1.0);
            current.push(format!("{x:.1},{y:.1}"));
        }
        previous = Some(at);
    }
    if current.len() == 1 {
        lines.push(format!("{0} {0}", current[0]));
    } else if current.len() > 1 {
        lines.push(current.join(" "));
    }
    lines
}

/// The time span the charts share: from the first frame kept to the last, a minute at least.
fn span(frames: &[DashboardFrame]) -> (i64, i64) {
    let end = frames.last().map_or(0, |frame| frame.at_ms);
    let start = frames.first().map_or(end, |frame| frame.at_ms);
    let span = (end - start).max(60_000);
    (end - span, span)
}

fn chart(
    id: &'static str,
    title: &'static str,
    unit: &'static str,
    frames: &[DashboardFrame],
    points: &[(i64, Option<f64>)],
) -> AnyView {
    let (start, span) = span(frames);
    let top = points
        .iter()
        .filter_map(|(_, value)| *value)
        .fold(0.0_f64, f64::max);
    let top = if top > 0.0 { top * 1.1 } else { 1.0 };
    let now = points
        .last()
        .and_then(|(_, value)| *value)
        .map_or_else(|| "—".to_owned(), |value| format!("{value:.1} {unit}"));
    let lines = segments(points, start, span, top)
        .into_iter()
        .map(|points| view! { <polyline points=points class="line"></polyline> })
        .collect_view();
    let drawing = view! {
        <svg id=id class="chart" viewBox=format!("0 0 {WIDTH} {HEIGHT}") preserveAspectRatio="none" role="img"
            aria-label=format!("{title} over the last {} s, in {unit}", span / 1000)>
            <line x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT class="axis-line"></line>
            {lines}
        </svg>
    }
    .into_any();
    view! {
        <figure class="chart-box">
            <figcaption>{title} " (" {unit} "): " <strong data-now>{now}</strong></figcaption>
            {axes(top, unit, start, span, drawing)}
        </figure>
    }
    .into_any()
}

/// One chart per live item: what Redis has left to sell over time, with the latest
/// figures of the ledger beside it.
fn stock(frames: &[DashboardFrame]) -> AnyView {
    let Some(last) = frames.last() else {
        return ().into_any();
    };
    if last.items.is_empty() {
        return view! { <p class="empty">"No live activity."</p> }.into_any();
    }
    last.items
        .iter()
        .map(|item| {
            let key = (item.activity_id, item.item_id);
            let points: Vec<(i64, Option<f64>)> = frames
                .iter()
                .map(|frame| {
                    let stock = frame
                        .items
                        .iter()
                        .find(|other| (other.activity_id, other.item_id) == key)
                        .and_then(|other| other.redis_stock);
                    (frame.at_ms, stock.map(|units| units as f64))
                })
                .collect();
            let (start, span) = span(frames);
            let top = (item.total.max(1)) as f64;
            let lines = segments(&points, start, span, top)
                .into_iter()
                .map(|points| view! { <polyline points=points class="line"></polyline> })
                .collect_view();
            let redis = item
                .redis_stock
                .map_or_else(|| "not pre-warmed".to_owned(), |units| units.to_string());
            view! {
                <figure class="chart-box" data-item=format!("{}-{}", item.activity_id, item.item_id)>
                    <figcaption>
                        {item.name.clone()} " (activity " {item.activity_id} "): Redis "
                        <strong data-redis-stock>{redis}</strong> " of " {item.total}
                        " · allocated " {item.allocated} " · sold " {item.sold} " · paid " {item.paid}
                    </figcaption>
                    {axes(top, "units", start, span, view! {
                        <svg class="chart" viewBox=format!("0 0 {WIDTH} {HEIGHT}") preserveAspectRatio="none" role="img" aria-label="Units left in Redis over time">
                            <line x1="0" y1=HEIGHT x2=WIDTH y2=HEIGHT class="axis-line"></line>
                            {lines}
                        </svg>
                    }.into_any())}
                </figure>
            }
        })
        .collect_view()
        .into_any()
}

/// Each live activity with a baseline run (its own, else its kind's): this second's figures
/// against the run's, with the difference ("buy p99 41 ms, baseline 18 ms, +128 %").
fn against_baseline(last: &DashboardFrame) -> AnyView {
    if last.against_baseline.is_empty() {
        return view! {
            <p class="empty" id="against-baseline-none">"No live activity has a baseline run (mark one on the Baselines page)."</p>
        }
        .into_any();
    }
    last.against_baseline
        .iter()
        .map(|activity| {
            let figures = activity
                .figures
                .iter()
                .map(|figure| {
                    view! { <li data-figure=figure.name.clone()>{figure.describe()}</li> }
                })
                .collect_view();
            view! {
                <section class="card" data-against-activity=activity.activity_id.to_string()>
                    <h3>"Activity #" {activity.activity_id} " against " {activity.run_name()}</h3>
                    <ul class="against-baseline">{figures}</ul>
                </section>
            }
        })
        .collect_view()
        .into_any()
}

fn levels(last: &DashboardFrame) -> AnyView {
    let queues = last
        .pipeline
        .queue_depth
        .iter()
        .map(|(queue, depth)| view! { <tr><td>"MQ backlog: " {queue.clone()}</td><td>{*depth}</td></tr> })
        .collect_view();
    let outbox = last
        .pipeline
        .outbox
        .iter()
        .map(|(status, rows)| view! { <tr><td>"Outbox: " {status.clone()}</td><td>{*rows}</td></tr> })
        .collect_view();
    let pool = &last.db_pool;
    view! {
        <table class="grid" tabindex="0" id="levels">
            <tbody>
                {queues}
                {outbox}
                <tr><td>"Dead letters waiting"</td><td data-dlq>{last.pipeline.dead_letters}</td></tr>
                <tr>
                    <td>"Database pool"</td>
                    <td data-pool>{pool.size - pool.idle.min(pool.size)} " in use, " {pool.idle} " idle, " {pool.max} " at most"</td>
                </tr>
                <tr>
                    <td>"Buy requests in flight"</td>
                    <td>{last.admission.in_flight} " of " {last.admission.limit}</td>
                </tr>
            </tbody>
        </table>
    }
    .into_any()
}

fn instances(last: &DashboardFrame) -> AnyView {
    let etcd = (!last.etcd_reachable).then(|| {
        view! { <p class="notice">"etcd did not answer: the instances are the last ones seen."</p> }
    });
    let rows = last
        .instances
        .iter()
        .map(|node| {
            let watch = if node.connected { "open" } else { "closed" };
            let synced = node
                .synced_ago_ms
                .map_or_else(|| "never".to_owned(), |ms| format!("{ms} ms ago"));
            view! {
                <tr data-node=node.node_id.clone()>
                    <td>{node.node_id.clone()}{node.leader.then_some(" (leader)")}</td>
                    <td>{node.address.clone()}</td>
                    <td>{watch}</td>
                    <td>{node.applied_revision}</td>
                    <td>{format!("{} ms ago", node.heartbeat_age_ms)}</td>
                    <td>{synced}</td>
                </tr>
            }
        })
        .collect_view();
    view! {
        {etcd}
        <table class="grid" tabindex="0" id="instances">
            <thead>
                <tr><th>"Node"</th><th>"Address"</th><th>"Watch"</th><th>"Applied revision"</th><th>"Heartbeat"</th><th>"Synced"</th></tr>
            </thead>
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

fn switches(last: &DashboardFrame) -> AnyView {
    let rows = last
        .switches
        .iter()
        .map(|(path, value)| view! { <tr data-switch=path.clone()><td><code>{path.clone()}</code></td><td>{value.clone()}</td></tr> })
        .collect_view();
    view! {
        <table class="grid" tabindex="0" id="switches">
            <tbody>{rows}</tbody>
        </table>
    }
    .into_any()
}

/// The browser's end of the stream.
#[cfg(feature = "hydrate")]
mod stream {
    use super::{keep, Link};
    use contract::DashboardFrame;
    use leptos::prelude::*;
    use wasm_bindgen::{closure::Closure, JsCast};

    const STREAM: &str = "/admin/api/dashboard/stream";

    /// Opens the stream once the page is live, and closes it when the page goes.
    pub(super) fn follow(frames: RwSignal<Vec<DashboardFrame>>, link: RwSignal<Link>) {
        Effect::new(move |_| {
            let Ok(source) = web_sys::EventSource::new(STREAM) else {
                link.set(Link::Closed);
                return;
            };
            let on_frame = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
                move |event: web_sys::MessageEvent| {
                    let Some(text) = event.data().as_string() else {
                        return;
                    };
                    if let Ok(frame) = serde_json::from_str::<DashboardFrame>(&text) {
                        link.set(Link::Live);
                        frames.update(|frames| keep(frames, frame));
                    }
                },
            );
            let _ =
                source.add_event_listener_with_callback("frame", on_frame.as_ref().unchecked_ref());
            let watched = source.clone();
            let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
                // The browser retries a dropped stream by itself; a refused one stays closed.
                let closed = watched.ready_state() == web_sys::EventSource::CLOSED;
                link.set(if closed {
                    Link::Closed
                } else {
                    Link::Reconnecting
                });
            });
            source.set_onerror(Some(on_error.as_ref().unchecked_ref()));
            let kept = send_wrapper::SendWrapper::new((source, on_frame, on_error));
            on_cleanup(move || kept.0.close());
        });
    }
}

#[cfg(test)]
mod tests {
    use super::{keep, segments, KEPT};
    use contract::{AdmissionFigures, BuyFigures, DashboardFrame, PipelineFigures, PoolFigures};
    use std::collections::BTreeMap;

    #[test]
    fn missing_seconds_break_the_line() {
        let points = [
            (0, Some(1.0)),
            (1_000, Some(2.0)),
            (5_000, Some(2.0)),
            (6_000, None),
            (7_000, Some(1.0)),
            (8_000, Some(1.0)),
        ];
        let lines = segments(&points, 0, 10_000, 2.0);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0], "0.0,60.0 60.0,0.0");
    }

    fn frame(node: &str, at_ms: i64) -> DashboardFrame {
        DashboardFrame {
            at_ms,
            node_id: node.to_owned(),
            funnel: Vec::new(),
            buy: BuyFigures {
                requests: 0,
                p99_ms: None,
            },
            items: Vec::new(),
            pipeline: PipelineFigures {
                queue_depth: BTreeMap::new(),
                outbox: BTreeMap::new(),
                dead_letters: 0,
            },
            db_pool: PoolFigures {
                size: 0,
                idle: 0,
                max: 0,
            },
            admission: AdmissionFigures {
                in_flight: 0,
                limit: 0,
            },
            instances: Vec::new(),
            etcd_reachable: true,
            switches: BTreeMap::new(),
            against_baseline: Vec::new(),
        }
    }

    #[test]
    fn a_backlog_sent_again_is_kept_once_and_another_instance_starts_over() {
        let mut frames = vec![frame("a", 1_000), frame("a", 2_000)];
        for again in [frame("a", 1_000), frame("a", 2_000), frame("a", 3_000)] {
            keep(&mut frames, again);
        }
        let seen: Vec<i64> = frames.iter().map(|frame| frame.at_ms).collect();
        assert_eq!(seen, [1_000, 2_000, 3_000]);
        keep(&mut frames, frame("b", 500));
        assert_eq!((frames.len(), frames[0].node_id.as_str()), (1, "b"));
        for at in 0..400 {
            keep(&mut frames, frame("b", 1_000 + at));
        }
        assert_eq!(frames.len(), KEPT);
    }
}
