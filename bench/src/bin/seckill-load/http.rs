//! The HTTP side: one pooled HTTP/1.1 client, the activity's item list for `--spread`, one
//! request of the run, and the classification of what came back.

use reqwest::{Client, StatusCode};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use uuid::Uuid;

use super::{args::Endpoint, plan::Buyer};

/// What one request came to.
pub struct Sample {
    /// From sending until the whole body was read.
    pub latency: Duration,
    pub result: Result<Reply, TransportError>,
}

/// An HTTP answer, reduced to what the report counts.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// `OK` for a success, else the body's `code` (`-` when the body has none).
    pub code: String,
    pub order_id: Option<Uuid>,
}

/// No HTTP answer at all, by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TransportError {
    Timeout,
    Connect,
    Body,
    Other,
}

impl TransportError {
    pub fn label(self) -> &'static str {
        match self {
            Self::Timeout => "timeout",
            Self::Connect => "connect",
            Self::Body => "body",
            Self::Other => "other",
        }
    }
}

/// The body of a buy request.
#[derive(Serialize)]
pub struct BuyBody {
    pub activity_id: i64,
    pub item_id: i64,
    pub quantity: u32,
}

#[derive(Deserialize)]
struct Accepted {
    order_id: Uuid,
    status: String,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
}

#[derive(Deserialize)]
struct Activity {
    items: Vec<ActivityItem>,
}

#[derive(Deserialize)]
struct ActivityItem {
    id: i64,
}

/// A client for the run: no proxy, HTTP/1.1, an idle pool as large as the concurrency.
pub fn client(pool_size: usize, timeout: Duration) -> reqwest::Result<Client> {
    Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(pool_size)
        .tcp_nodelay(true)
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
}

/// The ids of every item of the activity, from its public info.
pub async fn activity_items(
    client: &Client,
    base_url: &str,
    activity_id: i64,
) -> anyhow::Result<Vec<i64>> {
    let url = format!("{base_url}/api/activities/{activity_id}");
    let activity: Activity = client
        .get(&url)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    anyhow::ensure!(!activity.items.is_empty(), "{url} lists no items");
    Ok(activity.items.into_iter().map(|item| item.id).collect())
}

/// Where the run's requests go and how they are shaped.
pub struct Target {
    client: Client,
    endpoint: Endpoint,
    url: String,
}

impl Target {
    pub fn new(client: Client, base_url: &str, endpoint: Endpoint, activity_id: i64) -> Self {
        let path = match endpoint {
            Endpoint::Buy => "/api/seckill/buy".to_owned(),
            Endpoint::Healthz => "/healthz".to_owned(),
            Endpoint::SalePage => format!("/sale/{activity_id}/"),
            Endpoint::Register => format!("/api/activities/{activity_id}/registrations"),
        };
        Self {
            client,
            endpoint,
            url: format!("{base_url}{path}"),
        }
    }

    /// Sends `buyer`'s request for `order` with a fresh `X-Request-ID`; its latency runs
    /// from `since` (when it was due) to the end of the body.
    pub async fn send(&self, order: BuyBody, buyer: &Buyer, since: Instant) -> Sample {
        let request = match self.endpoint {
            Endpoint::Buy => self.client.post(&self.url).json(&order),
            Endpoint::Register => self
                .client
                .post(&self.url)
                .json(&serde_json::json!({ "item_id": order.item_id })),
            Endpoint::Healthz | Endpoint::SalePage => self.client.get(&self.url),
        }
        .header("Authorization", &buyer.authorization)
        .header("X-Request-ID", Uuid::new_v4().to_string());
        let request = match &buyer.forwarded_for {
            Some(address) => request.header("X-Forwarded-For", address),
            None => request,
        };
        let result = exchange(self.endpoint, request).await;
        Sample {
            latency: since.elapsed(),
            result,
        }
    }
}

async fn exchange(
    endpoint: Endpoint,
    request: reqwest::RequestBuilder,
) -> Result<Reply, TransportError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    let body = response.bytes().await.map_err(transport_error)?;
    Ok(classify(endpoint, status, &body))
}

fn transport_error(error: reqwest::Error) -> TransportError {
    if error.is_timeout() {
        TransportError::Timeout
    } else if error.is_connect() {
        TransportError::Connect
    } else if error.is_body() || error.is_decode() {
        TransportError::Body
    } else {
        TransportError::Other
    }
}

/// `OK` for a 200 that is what the endpoint promises (a `PRE_CREATED` order for a buy),
/// else the error body's `code`.
fn classify(endpoint: Endpoint, status: StatusCode, body: &[u8]) -> Reply {
    let reply = |code: &str, order_id| Reply {
        status: status.as_u16(),
        code: code.to_owned(),
        order_id,
    };
    match (endpoint, status) {
        (Endpoint::Healthz | Endpoint::SalePage | Endpoint::Register, StatusCode::OK) => {
            reply("OK", None)
        }
        (Endpoint::Buy, StatusCode::OK) => match serde_json::from_slice::<Accepted>(body) {
            Ok(accepted) if accepted.status == "PRE_CREATED" => {
                reply("OK", Some(accepted.order_id))
            }
            _ => reply("UNEXPECTED_BODY", None),
        },
        _ => match serde_json::from_slice::<ErrorBody>(body) {
            Ok(error) => reply(&error.code, None),
            Err(_) => reply("-", None),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pre_created_order_is_ok_and_carries_its_id() {
        let id = Uuid::new_v4();
        let body = format!(r#"{{"order_id":"{id}","status":"PRE_CREATED"}}"#);
        let reply = classify(Endpoint::Buy, StatusCode::OK, body.as_bytes());
        assert_eq!((reply.code.as_str(), reply.order_id), ("OK", Some(id)));
    }

    #[test]
    fn errors_are_counted_by_their_code() {
        let reply = classify(
            Endpoint::Buy,
            StatusCode::CONFLICT,
            br#"{"code":"SOLD_OUT","message":"sold out"}"#,
        );
        assert_eq!((reply.status, reply.code.as_str()), (409, "SOLD_OUT"));
        let reply = classify(Endpoint::Buy, StatusCode::NOT_FOUND, b"");
        assert_eq!((reply.status, reply.code.as_str()), (404, "-"));
        let reply = classify(Endpoint::Buy, StatusCode::OK, b"{}");
        assert_eq!(reply.code, "UNEXPECTED_BODY");
    }

    #[test]
    fn a_healthz_200_is_ok() {
        let reply = classify(Endpoint::Healthz, StatusCode::OK, b"ok");
        assert_eq!((reply.code.as_str(), reply.order_id), ("OK", None));
    }
}
