//! Who a request comes from: the one resolver of client addresses that the buy funnel's
//! windows, the hot keys, the login limits and the request logs all use.
//!
//! Buyers reach the product through CDNs, load balancers and gateways, so the TCP peer is
//! usually a proxy, and every buyer behind it would be one address: one rate window and one
//! hot key for everybody. The forwarding headers name the real client, but anyone can send
//! them, so they are believed only from the peers an operator names in
//! `SECKILL_TRUSTED_PROXIES` (networks, empty by default). From a trusted peer, the client is
//! the right-most address of `X-Forwarded-For` (or, without it, of `Forwarded: for=`) that
//! is not itself a trusted proxy: every proxy appends the address it was reached from, so the
//! entries right of the client's were written by trusted proxies and the ones left of it by
//! the client, who may write anything. From any other peer the headers are ignored: a client
//! cannot choose its own address.
//!
//! An IPv6 client is counted by its /64 ([`counted`]): one subscriber commonly holds a
//! whole /64 and can change the low half at will, so counting the full address would give
//! him a fresh window per request.

use axum::{
    extract::ConnectInfo,
    http::{request::Parts, HeaderMap},
};
use serde::{Deserialize, Deserializer};
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    str::FromStr,
};

/// One network of trusted proxies: an address and how many leading bits of it count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Network {
    base: IpAddr,
    prefix: u8,
}

impl FromStr for Network {
    type Err = String;

    /// `10.0.0.0/8`, `2001:db8::/32`, or a bare address (the host alone).
    fn from_str(text: &str) -> Result<Self, String> {
        let invalid = || format!("`{text}` is not an address or a network (CIDR)");
        let (address, prefix) = match text.split_once('/') {
            Some((address, prefix)) => (address, Some(prefix)),
            None => (text, None),
        };
        let base = canonical(address.trim().parse::<IpAddr>().map_err(|_| invalid())?);
        let width = if base.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(prefix) => prefix
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|bits| *bits <= width)
                .ok_or_else(invalid)?,
            None => width,
        };
        Ok(Self {
            base: masked(base, prefix),
            prefix,
        })
    }
}

impl Network {
    fn contains(&self, address: IpAddr) -> bool {
        address.is_ipv4() == self.base.is_ipv4() && masked(address, self.prefix) == self.base
    }
}

/// The networks whose forwarding headers are believed (`SECKILL_TRUSTED_PROXIES`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Network>);

impl<'de> Deserialize<'de> for TrustedProxies {
    fn deserialize<D: Deserializer<'de>>(field: D) -> Result<Self, D::Error> {
        let texts = Vec::<String>::deserialize(field)?;
        texts
            .iter()
            .map(|text| text.parse::<Network>())
            .collect::<Result<Vec<_>, _>>()
            .map(Self)
            .map_err(serde::de::Error::custom)
    }
}

impl FromIterator<Network> for TrustedProxies {
    fn from_iter<I: IntoIterator<Item = Network>>(networks: I) -> Self {
        Self(networks.into_iter().collect())
    }
}

impl TrustedProxies {
    fn trusts(&self, address: IpAddr) -> bool {
        self.0.iter().any(|network| network.contains(address))
    }

    /// The client of a request that came from `peer` with these headers.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        // Most deployments trust nobody: the headers are not even read.
        if self.0.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let mut client = peer;
        for hop in forwarded_hops(headers).into_iter().rev() {
            match hop {
                Some(address) if self.trusts(address) => client = address,
                Some(address) => return address,
                // A trusted proxy writes addresses only: what it did not write cannot be
                // told apart from what the client wrote, so the last hop it vouched for is it.
                None => return client,
            }
        }
        client
    }
}

/// The hops the forwarding headers list, left (farthest) to right (nearest); `None` for an
/// entry that is not an address (`unknown`, an obfuscated name, garbage).
/// `X-Forwarded-For` when present, else `Forwarded`'s `for=` parameters; several lines of one
/// header are one list, in order.
fn forwarded_hops(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let lines = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect()
    };
    let x_forwarded_for = lines("x-forwarded-for");
    if !x_forwarded_for.is_empty() {
        return x_forwarded_for
            .iter()
            .flat_map(|line| line.split(','))
            .map(hop_address)
            .collect();
    }
    lines("forwarded")
        .iter()
        .flat_map(|line| line.split(','))
        .filter_map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| hop_address(value))
            })
        })
        .collect()
}

/// One hop as proxies write it: `192.0.2.7`, `192.0.2.7:4711`, `2001:db8::7`,
/// `[2001:db8::7]:4711`, optionally in double quotes (`Forwarded`'s spelling).
fn hop_address(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    let address = if let Some(bracketed) = text.strip_prefix('[') {
        bracketed.split_once(']')?.0
    } else if text.matches(':').count() == 1 {
        // An IPv4 address with a port; a bare IPv6 address has several colons.
        text.split_once(':')?.0
    } else {
        text
    };
    address.parse::<IpAddr>().ok().map(canonical)
}

/// An IPv4 address mapped into IPv6 (a dual-stack listener's peer) as the IPv4 address.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}

/// `address` with all but its leading `prefix` bits cleared.
fn masked(address: IpAddr, prefix: u8) -> IpAddr {
    match address {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & mask))
        }
    }
}

/// The address a client is counted under in rate windows and hot keys: IPv4 as it is, IPv6
/// by its /64 (the network's first address).
pub fn counted(address: IpAddr) -> IpAddr {
    match canonical(address) {
        v6 @ IpAddr::V6(_) => masked(v6, 64),
        v4 => v4,
    }
}

/// The request's client as [`TrustedProxies::client`] resolves it, for handlers and the
/// request's span. The binary's HTTP layer resolves it once per request, outermost, and keeps it in the
/// request's extensions; everything after reads it from there.
#[derive(Clone, Copy, Debug)]
pub struct ClientAddress(pub IpAddr);

/// The client of a request's head: as the HTTP layer kept it, else resolved now; without a
/// peer (a request made inside the process) the unspecified address, which no window or hot
/// key of a real client shares.
pub fn resolve(trusted: &TrustedProxies, parts: &Parts) -> IpAddr {
    if let Some(ClientAddress(client)) = parts.extensions.get::<ClientAddress>() {
        return *client;
    }
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
    trusted.client(peer, &parts.headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(networks: &[&str]) -> TrustedProxies {
        TrustedProxies(
            networks
                .iter()
                .map(|n| n.parse().expect("network"))
                .collect(),
        )
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, value.parse().expect("header value"));
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("address")
    }

    #[test]
    fn networks_parse_with_or_without_a_prefix_and_refuse_nonsense() {
        let network: Network = "10.1.2.3/8".parse().expect("v4 network");
        assert!(network.contains(ip("10.200.0.1")));
        assert!(!network.contains(ip("11.0.0.1")));
        let host: Network = "192.0.2.7".parse().expect("v4 host");
        assert!(host.contains(ip("192.0.2.7")) && !host.contains(ip("192.0.2.8")));
        let v6: Network = "2001:db8::/32".parse().expect("v6 network");
        assert!(v6.contains(ip("2001:db8:ffff::1")));
        assert!(!v6.contains(ip("10.0.0.1")));
        let everything: Network = "0.0.0.0/0".parse().expect("all of v4");
        assert!(everything.contains(ip("203.0.113.9")));
        for bad in ["10.0.0.0/33", "::/129", "host", "10.0.0.0/x", ""] {
            assert!(bad.parse::<Network>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_its_headers_say() {
        let proxies = trusted(&["10.0.0.0/8"]);
        let spoofed = headers(&[
            ("x-forwarded-for", "198.51.100.1"),
            ("forwarded", "for=198.51.100.2"),
        ]);
        assert_eq!(
            proxies.client(ip("203.0.113.5"), &spoofed),
            ip("203.0.113.5")
        );
        assert_eq!(
            TrustedProxies::default().client(ip("10.0.0.1"), &spoofed),
            ip("10.0.0.1")
        );
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_hop_is_the_client() {
        let proxies = trusted(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        // The client wrote the first entry himself; the balancer appended his real address.
        let forwarded = headers(&[("x-forwarded-for", "1.1.1.1, 203.0.113.5, 10.0.0.3")]);
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &forwarded),
            ip("203.0.113.5")
        );
        // Two header lines are one list.
        let split = headers(&[
            ("x-forwarded-for", "1.1.1.1"),
            ("x-forwarded-for", "203.0.113.6:51000, 10.0.0.3"),
        ]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &split), ip("203.0.113.6"));
        // RFC 7239's spelling, used when X-Forwarded-For is absent.
        let rfc = headers(&[(
            "forwarded",
            r#"for=1.1.1.1, for="[2001:db8:cafe::17]:4711";proto=https, For=10.0.0.9"#,
        )]);
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &rfc),
            ip("2001:db8:cafe::17")
        );
        // Only trusted hops: the farthest of them; no header at all: the peer.
        let inside = headers(&[("x-forwarded-for", "10.0.0.7, 10.0.0.3")]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &inside), ip("10.0.0.7"));
        assert_eq!(
            proxies.client(ip("10.0.0.2"), &HeaderMap::new()),
            ip("10.0.0.2")
        );
        // A dual-stack listener's view of an IPv4 proxy is that proxy.
        assert_eq!(
            proxies.client(ip("::ffff:10.0.0.2"), &forwarded),
            ip("203.0.113.5")
        );
    }

    #[test]
    fn an_entry_that_is_not_an_address_ends_the_walk_at_the_last_trusted_hop() {
        let proxies = trusted(&["10.0.0.0/8"]);
        let garbage = headers(&[("x-forwarded-for", "203.0.113.5, unknown, 10.0.0.3")]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &garbage), ip("10.0.0.3"));
        let forged = headers(&[("x-forwarded-for", "not an address")]);
        assert_eq!(proxies.client(ip("10.0.0.2"), &forged), ip("10.0.0.2"));
    }

    #[test]
    fn ipv6_clients_are_counted_by_their_64() {
        assert_eq!(counted(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(counted(ip("2001:db8:1:2:bbbb::9")), ip("2001:db8:1:2::"));
        assert_ne!(counted(ip("2001:db8:1:3::1")), ip("2001:db8:1:2::"));
        assert_eq!(counted(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(counted(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
    }
}
