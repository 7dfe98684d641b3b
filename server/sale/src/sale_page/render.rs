//! Rendering a published page: the HTML with everything static in it (title, times, items,
//! prices, descriptions), its stylesheet, its script (the activity's settings ahead of the
//! page's behaviour in `assets/events.js` and `assets/sale.js`) under content-hashed names, and the button script
//! in each of its phases. Pure: the same activity and version give the same bytes.

use chrono::{DateTime, SecondsFormat, Utc};
use contract::{format_cents, ActivityKind, SaleMode};
use serde::Serialize;

use super::rules::{hashed_name, ButtonPhase};
use crate::catalog::store::StoredActivity;

/// The buyer's event stream, which the page's behaviour opens.
const EVENTS: &str = include_str!("assets/events.js");
/// The page's behaviour: countdown, button, challenge, buy, order and payment.
const BEHAVIOUR: &str = include_str!("assets/sale.js");
const STYLESHEET: &str = include_str!("assets/sale.css");

/// Where the page is served.
pub fn page_url(activity_id: i64) -> String {
    format!("/sale/{activity_id}/")
}

/// Where the button script of an activity is served.
pub fn button_url(activity_id: i64) -> String {
    format!("/sale/{activity_id}/button.js")
}

/// Where a hashed asset is served.
pub fn asset_url(name: &str) -> String {
    format!("/sale/assets/{name}")
}

/// An asset under its content-hashed name.
pub struct Asset {
    pub name: String,
    pub body: String,
}

impl Asset {
    fn hashed(stem: &str, extension: &str, body: String) -> Self {
        Self {
            name: hashed_name(stem, extension, body.as_bytes()),
            body,
        }
    }
}

/// One publication of a page.
pub struct Rendered {
    pub html: String,
    pub script: Asset,
    pub stylesheet: Asset,
}

/// What the script needs to know of its activity, written ahead of its behaviour.
#[derive(Serialize)]
struct ScriptSettings<'a> {
    activity: i64,
    version: i64,
    kind: &'a str,
    starts_at_ms: i64,
    ends_at_ms: i64,
    button: String,
    /// `first_come` or `lottery`: a lottery's page registers, shows the draw's outcome and
    /// buys with the buyer's code (docs/lottery.md).
    mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    registration_opens_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    registration_closes_at_ms: Option<i64>,
}

pub fn render(activity: &StoredActivity, version: i64) -> Rendered {
    let settings = ScriptSettings {
        activity: activity.id,
        version,
        kind: activity.kind.as_str(),
        starts_at_ms: activity.starts_at.timestamp_millis(),
        ends_at_ms: activity.ends_at.timestamp_millis(),
        button: button_url(activity.id),
        mode: if activity.lottery.is_some() {
            SaleMode::Lottery.as_str()
        } else {
            SaleMode::FirstCome.as_str()
        },
        registration_opens_at_ms: activity
            .lottery
            .as_ref()
            .map(|l| l.terms.registration_opens_at.timestamp_millis()),
        registration_closes_at_ms: activity
            .lottery
            .as_ref()
            .map(|l| l.terms.registration_closes_at.timestamp_millis()),
    };
    let settings = serde_json::to_string(&settings).unwrap_or_default();
    let script = Asset::hashed(
        "sale",
        "js",
        format!(
            "const SALE = {settings};\n{}\n{}",
            compact(EVENTS),
            compact(BEHAVIOUR)
        ),
    );
    let stylesheet = Asset::hashed("sale", "css", STYLESHEET.to_owned());
    let html = html(activity, version, &script.name, &stylesheet.name);
    Rendered {
        html,
        script,
        stylesheet,
    }
}

/// The script as buyers download it: without its indentation, its blank lines and its
/// lines of comment (which are for the people who read `assets/`). Line breaks stay,
/// so no statement is joined to the next.
fn compact(script: &str) -> String {
    script
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The button script of one phase: a call the page's polling reads (and a plain script
/// include could run), naming the publication and the phase so every change has a version.
pub fn button_script(activity_id: i64, version: i64, phase: ButtonPhase) -> String {
    let state = serde_json::json!({
        "activity": activity_id,
        "version": format!("{version}.{}", phase.as_str()),
        "phase": phase.as_str(),
        "canStart": phase.can_start(),
    });
    format!("seckillButton({state});\n")
}

/// Text for HTML content and double-quoted attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
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

fn time(at: DateTime<Utc>) -> String {
    format!(
        r#"<time datetime="{}">{}</time>"#,
        at.to_rfc3339_opts(SecondsFormat::Secs, true),
        at.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

fn html(activity: &StoredActivity, version: i64, script: &str, stylesheet: &str) -> String {
    let title = escape(&activity.title);
    let items: String = activity
        .lines
        .iter()
        .enumerate()
        .map(|(index, line)| {
            let checked = if index == 0 { " checked" } else { "" };
            let description = if line.description.trim().is_empty() {
                String::new()
            } else {
                format!(
                    "\n      <p class=\"description\">{}</p>",
                    escape(&line.description)
                )
            };
            format!(
                r#"    <li class="item" data-item="{id}">
      <label><input type="radio" name="item" value="{id}"{checked}> <span class="name">{name}</span> <span class="price" data-cents="{cents}">¥{price}</span></label>{description}
      <p class="limit">At most {limit} per buyer · <span class="left">{stock} on sale</span></p>
    </li>
"#,
                id = line.item_id,
                name = escape(&line.name),
                cents = line.price_cents,
                price = format_cents(line.price_cents),
                limit = line.per_user_limit,
                stock = line.total_stock,
            )
        })
        .collect();
    // A lottery's part: where the buyer registers and reads the draw's outcome.
    let lottery = match &activity.lottery {
        Some(lottery) => format!(
            "    <p id=\"lottery\" role=\"status\">Registration: {} to {}; the draw follows.</p>\n    <button id=\"register\" type=\"button\" disabled>Register for the draw</button>\n",
            time(lottery.terms.registration_opens_at),
            time(lottery.terms.registration_closes_at)
        ),
        None => String::new(),
    };
    let seats = match activity.kind {
        ActivityKind::Seated => {
            "  <p><label for=\"seats\">Seats (e.g. B201, B202)</label> <input id=\"seats\" autocomplete=\"off\"></p>\n"
        }
        ActivityKind::Standard => "",
    };
    format!(
        r##"<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="stylesheet" href="{css}">
<script defer src="{js}"></script>
</head>
<body>
<main id="sale" data-activity="{id}" data-version="{version}">
  <h1 id="title">{title}</h1>
  <p class="times">From {starts} to {ends}</p>
  <ul id="items">
{items}  </ul>
{seats}  <section id="live">
    <p id="phase" role="status" data-phase="unknown">Sale status unknown: the page has not reached the shop yet.</p>
    <p id="countdown"></p>
{lottery}    <p id="challenge" hidden><label for="answer" id="question"></label> <input id="answer" inputmode="numeric" autocomplete="off"></p>
    <button id="buy" type="button" disabled>Buy now</button>
    <p id="message" role="alert"></p>
    <div id="order" hidden>
      <p id="order-id" class="meta"></p>
      <p id="order-status" role="status"></p>
      <p id="order-amount"></p>
      <button id="pay" type="button" hidden>Pay</button>
      <a id="recheck" href="#" hidden>Check my order again</a>
    </div>
  </section>
  <noscript><p>Buying needs JavaScript; the prices above are current.</p></noscript>
</main>
</body>
</html>
"##,
        id = activity.id,
        css = asset_url(stylesheet),
        js = asset_url(script),
        starts = time(activity.starts_at),
        ends = time(activity.ends_at),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::store::StoredLine;

    fn activity(title: &str) -> StoredActivity {
        let starts_at = "2030-01-01T10:00:00Z".parse().expect("time");
        StoredActivity {
            id: 7,
            merchant_id: 1,
            title: title.into(),
            kind: ActivityKind::Standard,
            starts_at,
            ends_at: starts_at + chrono::Duration::hours(1),
            pay_timeout_s: 900,
            rehearsal_of: None,
            lines: vec![StoredLine {
                item_id: 12,
                name: "Phone <Pro>".into(),
                description: "Fast & small".into(),
                total_stock: 100,
                allocated: 0,
                sold: 0,
                per_user_limit: 1,
                price_cents: 49_900,
            }],
            seats: vec![],
            lottery: None,
        }
    }

    #[test]
    fn the_page_carries_everything_static_escaped() {
        let page = render(&activity("Double <11>"), 3);
        for expected in [
            "<title>Double &lt;11&gt;</title>",
            "Phone &lt;Pro&gt;",
            "Fast &amp; small",
            r#"data-cents="49900">¥499.00</span>"#,
            r#"<time datetime="2030-01-01T10:00:00Z">2030-01-01 10:00:00 UTC</time>"#,
            r#"<button id="buy" type="button" disabled>"#,
            r#"data-version="3""#,
            "Sale status unknown",
        ] {
            assert!(page.html.contains(expected), "{expected} missing");
        }
        assert!(page.html.contains(&asset_url(&page.script.name)));
        assert!(page.html.contains(&asset_url(&page.stylesheet.name)));
    }

    #[test]
    fn the_script_name_follows_the_activitys_settings() {
        let first = render(&activity("A"), 1);
        assert_eq!(first.script.name, render(&activity("A"), 1).script.name);
        assert_ne!(first.script.name, render(&activity("A"), 2).script.name);
        assert!(first
            .script
            .body
            .starts_with("const SALE = {\"activity\":7,"));
        // The stylesheet is the same for every activity and version.
        assert_eq!(
            first.stylesheet.name,
            render(&activity("B"), 2).stylesheet.name
        );
    }

    #[test]
    fn the_script_leaves_out_comments_and_indentation_only() {
        let script = "// why\n(() => {\n  // what\n  const a = '// not a comment';\n\n  f(a); // kept\n})();\n";
        assert_eq!(
            compact(script),
            "(() => {\nconst a = '// not a comment';\nf(a); // kept\n})();"
        );
    }

    #[test]
    fn each_button_phase_says_whether_the_sale_can_start() {
        let open = button_script(7, 2, ButtonPhase::Open);
        assert!(open.contains(r#""canStart":true"#), "{open}");
        assert!(open.contains(r#""version":"2.open""#), "{open}");
        let upcoming = button_script(7, 2, ButtonPhase::Upcoming);
        assert!(upcoming.contains(r#""canStart":false"#), "{upcoming}");
        assert!(upcoming.starts_with("seckillButton({"));
    }
}
