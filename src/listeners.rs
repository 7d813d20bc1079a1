//! Kafka's listener configuration, parsed and checked: `listeners`,
//! `advertised.listeners`, `listener.security.protocol.map` and
//! `inter.broker.listener.name`, with Kafka's meaning and Kafka's checks (a pure
//! function of the four strings, so the config loader and tests drive it alike).
//!
//! Invariants of a [`ListenerConfig`]: listener names are unique and upper case; each
//! maps to one of the four security protocols; no two listeners share a port (Kafka
//! allows it only for one IPv4 and one IPv6 address, which this broker does not bind
//! yet); every advertised listener names a listener, none advertises the unroutable
//! `0.0.0.0`, and the inter-broker listener is one of them.

use std::collections::BTreeMap;

/// Kafka's four security protocols.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    fn parse(s: &str) -> Result<Self, ListenerError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "PLAINTEXT" => Ok(Self::Plaintext),
            "SSL" => Ok(Self::Ssl),
            "SASL_PLAINTEXT" => Ok(Self::SaslPlaintext),
            "SASL_SSL" => Ok(Self::SaslSsl),
            other => Err(ListenerError(format!(
                "unknown security protocol {other} (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)"
            ))),
        }
    }

    /// Kafka's name for it, as configurations and DescribeConfigs spell it.
    pub fn kafka_name(self) -> &'static str {
        match self {
            Self::Plaintext => "PLAINTEXT",
            Self::Ssl => "SSL",
            Self::SaslPlaintext => "SASL_PLAINTEXT",
            Self::SaslSsl => "SASL_SSL",
        }
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// A named endpoint: `NAME://host:port`. An empty host means every interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// A listener the broker binds, with its protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub endpoint: Endpoint,
    pub protocol: SecurityProtocol,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub listeners: Vec<Listener>,
    /// What Metadata gives a client that connected on each listener, by name.
    pub advertised: Vec<Endpoint>,
    pub inter_broker: String,
}

/// A listener setting Kafka would refuse, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ListenerError(String);

/// Kafka's default `listener.security.protocol.map`: each protocol's name maps to itself.
const DEFAULT_PROTOCOL_MAP: &str =
    "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL";

/// Parses and checks the four settings; `None` is a setting left unset (Kafka's
/// defaults: the default protocol map, advertised = listeners, the inter-broker listener
/// the one named PLAINTEXT).
pub fn parse(
    listeners: &str,
    advertised: Option<&str>,
    protocol_map: Option<&str>,
    inter_broker: Option<&str>,
) -> Result<ListenerConfig, ListenerError> {
    let map = protocol_map_of(protocol_map.unwrap_or(DEFAULT_PROTOCOL_MAP))?;
    let endpoints = endpoints_of("listeners", listeners)?;
    if endpoints.is_empty() {
        return Err(ListenerError("listeners names no listener".into()));
    }
    let mut bound = Vec::with_capacity(endpoints.len());
    for e in endpoints {
        let protocol = *map.get(&e.name).ok_or_else(|| {
            ListenerError(format!(
                "listener {} is not in listener.security.protocol.map",
                e.name
            ))
        })?;
        if let Some(other) = bound.iter().find(|l: &&Listener| l.endpoint.port == e.port) {
            return Err(ListenerError(format!(
                "listeners {} and {} use the same port {}",
                other.endpoint.name, e.name, e.port
            )));
        }
        bound.push(Listener {
            endpoint: e,
            protocol,
        });
    }
    let advertised = match advertised {
        None => bound.iter().map(|l| l.endpoint.clone()).collect(),
        Some(s) => endpoints_of("advertised.listeners", s)?,
    };
    for a in &advertised {
        if !bound.iter().any(|l| l.endpoint.name == a.name) {
            return Err(ListenerError(format!(
                "advertised listener {} is not one of listeners",
                a.name
            )));
        }
        if a.host == "0.0.0.0" {
            return Err(ListenerError(format!(
                "advertised listener {} uses the nonroutable meta-address 0.0.0.0",
                a.name
            )));
        }
    }
    let inter_broker = inter_broker
        .map(|n| n.trim().to_ascii_uppercase())
        .unwrap_or_else(|| "PLAINTEXT".into());
    if !advertised.iter().any(|a| a.name == inter_broker) {
        return Err(ListenerError(format!(
            "inter.broker.listener.name {inter_broker} must be an advertised listener"
        )));
    }
    Ok(ListenerConfig {
        listeners: bound,
        advertised,
        inter_broker,
    })
}

/// The protocol listener `name` maps to in `protocol_map` (Kafka's default map when
/// unset): how the controller listener, which `listeners` need not name, is secured.
pub fn protocol_of(
    name: &str,
    protocol_map: Option<&str>,
) -> Result<SecurityProtocol, ListenerError> {
    let name = name.trim().to_ascii_uppercase();
    protocol_map_of(protocol_map.unwrap_or(DEFAULT_PROTOCOL_MAP))?
        .get(&name)
        .copied()
        .ok_or_else(|| {
            ListenerError(format!(
                "listener {name} is not in listener.security.protocol.map"
            ))
        })
}

fn protocol_map_of(s: &str) -> Result<BTreeMap<String, SecurityProtocol>, ListenerError> {
    let mut map = BTreeMap::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, protocol) = item.split_once(':').ok_or_else(|| {
            ListenerError(format!(
                "listener.security.protocol.map entry {item} is not NAME:PROTOCOL"
            ))
        })?;
        let name = listener_name(name)?;
        if map
            .insert(name.clone(), SecurityProtocol::parse(protocol)?)
            .is_some()
        {
            return Err(ListenerError(format!(
                "listener.security.protocol.map names {name} twice"
            )));
        }
    }
    Ok(map)
}

fn endpoints_of(key: &str, s: &str) -> Result<Vec<Endpoint>, ListenerError> {
    let mut out: Vec<Endpoint> = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let (name, address) = item
            .split_once("://")
            .ok_or_else(|| ListenerError(format!("{key} entry {item} is not NAME://HOST:PORT")))?;
        let name = listener_name(name)?;
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| ListenerError(format!("{key} entry {item} has no port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| ListenerError(format!("{key} entry {item} has an invalid port")))?;
        // IPv6 literals are bracketed, as in Kafka: [::1]:9092.
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if out.iter().any(|e| e.name == name) {
            return Err(ListenerError(format!("{key} names listener {name} twice")));
        }
        out.push(Endpoint {
            name,
            host: host.to_string(),
            port,
        });
    }
    Ok(out)
}

/// Listener names are case-insensitive in Kafka and kept upper case.
fn listener_name(name: &str) -> Result<String, ListenerError> {
    let name = name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(ListenerError(format!("invalid listener name {name:?}")));
    }
    Ok(name.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plaintext_listener_alone_is_kafkas_default_shape() {
        let c = parse("PLAINTEXT://127.0.0.1:9092", None, None, None).expect("valid");
        assert_eq!(c.listeners.len(), 1);
        assert_eq!(c.listeners[0].protocol, SecurityProtocol::Plaintext);
        assert_eq!(c.advertised, vec![c.listeners[0].endpoint.clone()]);
        assert_eq!(c.inter_broker, "PLAINTEXT");
    }

    #[test]
    fn named_listeners_map_to_their_protocols_and_advertise_their_own_addresses() {
        let c = parse(
            "INTERNAL://127.0.0.1:9092,external://:9094,V6://[::1]:9095",
            Some("INTERNAL://127.0.0.1:9092,EXTERNAL://broker.example.com:9094,V6://[::1]:9095"),
            Some("INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL,V6:SSL"),
            Some("internal"),
        )
        .expect("valid");
        let protocols: Vec<_> = c.listeners.iter().map(|l| l.protocol).collect();
        assert_eq!(
            protocols,
            [
                SecurityProtocol::Plaintext,
                SecurityProtocol::SaslSsl,
                SecurityProtocol::Ssl
            ]
        );
        assert_eq!(
            c.listeners[1].endpoint.host, "",
            "an empty host binds every interface"
        );
        assert_eq!(c.listeners[2].endpoint.host, "::1");
        assert_eq!(c.advertised[1].host, "broker.example.com");
        assert_eq!(c.inter_broker, "INTERNAL");
        assert!(SecurityProtocol::SaslSsl.uses_tls() && SecurityProtocol::SaslSsl.uses_sasl());
        assert!(!SecurityProtocol::Plaintext.uses_tls());
    }

    #[test]
    fn what_kafka_refuses_is_refused() {
        let refused = |l: &str, a: Option<&str>, m: Option<&str>, i: Option<&str>| {
            parse(l, a, m, i).expect_err(l).to_string()
        };
        assert!(refused("", None, None, None).contains("no listener"));
        assert!(refused("OUTSIDE://:9092", None, None, None).contains("protocol.map"));
        assert!(refused(
            "PLAINTEXT://:9092,SSL://:9092",
            None,
            None,
            Some("PLAINTEXT")
        )
        .contains("same port"));
        assert!(refused("PLAINTEXT://:9092,PLAINTEXT://:9093", None, None, None).contains("twice"));
        assert!(refused("PLAINTEXT://0.0.0.0:9092", None, None, None).contains("0.0.0.0"));
        assert!(
            refused("PLAINTEXT://:9092", Some("SSL://h:9093"), None, None)
                .contains("not one of listeners")
        );
        assert!(refused("SSL://:9093", None, None, None).contains("inter.broker.listener.name"));
        assert!(refused("PLAINTEXT://:port", None, None, None).contains("invalid port"));
        assert!(
            refused("PLAINTEXT://:9092", None, Some("PLAINTEXT:TLS"), None)
                .contains("unknown security protocol")
        );
        assert!(refused("PLAIN TEXT://:9092", None, None, None).contains("invalid listener name"));
        assert!(refused("localhost:9092", None, None, None).contains("NAME://HOST:PORT"));
    }
}
