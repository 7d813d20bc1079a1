//! The principal of a client that authenticated with a TLS certificate (mutual TLS), as
//! Kafka derives it: the certificate's subject as an RFC 2253 distinguished name (what
//! Java's `X500Principal.getName()` gives: the most specific RDN first, `,` between
//! RDNs, `+` inside a multi-valued one, Kafka's keywords CN, L, ST, O, OU, C, STREET,
//! DC, UID and `oid=#hex` for any other attribute), mapped by `ssl.principal.mapping.rules`
//! (Kafka's `SslPrincipalMapper`: `RULE:pattern/replacement/[LU]` entries and `DEFAULT`,
//! tried in order; a rule applies when its pattern matches the whole name; no rule
//! applying refuses the client).
//!
//! Pure functions of the certificate and the rules: the connection calls them once,
//! after the handshake, and keeps the result for the connection's life.

use regex::Regex;

/// Why a certificate gives no principal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrincipalError {
    #[error("the client certificate cannot be read: {0}")]
    Certificate(String),
    #[error("no rule of ssl.principal.mapping.rules applies to {0}")]
    NoRuleApplies(String),
}

/// One `ssl.principal.mapping.rules` entry.
#[derive(Debug, Clone)]
enum Rule {
    Default,
    Replace {
        /// `^(?:pattern)$`: whether the rule applies.
        whole: Regex,
        pattern: Regex,
        /// In the regex crate's syntax (`${1}`), converted from Java's (`$1`).
        replacement: String,
        case: Case,
    },
}

#[derive(Debug, Clone, Copy)]
enum Case {
    Keep,
    Lower,
    Upper,
}

/// Kafka's `ssl.principal.mapping.rules` (default: `DEFAULT`, the name unchanged).
#[derive(Debug, Clone)]
pub struct PrincipalMapping {
    rules: Vec<Rule>,
}

impl Default for PrincipalMapping {
    fn default() -> PrincipalMapping {
        PrincipalMapping {
            rules: vec![Rule::Default],
        }
    }
}

impl PrincipalMapping {
    /// Parses the rules as Kafka writes them, e.g.
    /// `RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L,DEFAULT`.
    pub fn parse(rules: &str) -> Result<PrincipalMapping, String> {
        let mut out = Vec::new();
        let mut rest = rules.trim();
        while !rest.is_empty() {
            if let Some(after) = rest.strip_prefix("DEFAULT") {
                out.push(Rule::Default);
                rest = after;
            } else if let Some(after) = rest.strip_prefix("RULE:") {
                let (pattern, after) = until_slash(after)
                    .ok_or_else(|| format!("a rule's pattern has no closing '/': {rest}"))?;
                let (replacement, after) = until_slash(after)
                    .ok_or_else(|| format!("a rule's replacement has no closing '/': {rest}"))?;
                let (case, after) = match after.chars().next() {
                    Some('L') => (Case::Lower, &after[1..]),
                    Some('U') => (Case::Upper, &after[1..]),
                    _ => (Case::Keep, after),
                };
                let whole = Regex::new(&format!("^(?:{pattern})$"))
                    .map_err(|e| format!("rule pattern {pattern:?}: {e}"))?;
                let pattern =
                    Regex::new(&pattern).map_err(|e| format!("rule pattern {pattern:?}: {e}"))?;
                out.push(Rule::Replace {
                    whole,
                    pattern,
                    replacement: java_replacement(&replacement),
                    case,
                });
                rest = after;
            } else {
                return Err(format!(
                    "ssl.principal.mapping.rules: expected RULE:pattern/replacement/ or DEFAULT at {rest:?}"
                ));
            }
            rest = rest.trim_start();
            match rest.strip_prefix(',') {
                Some(after) => rest = after.trim_start(),
                None if rest.is_empty() => {}
                None => {
                    return Err(format!(
                        "ssl.principal.mapping.rules: expected ',' at {rest:?}"
                    ))
                }
            }
        }
        if out.is_empty() {
            out.push(Rule::Default);
        }
        Ok(PrincipalMapping { rules: out })
    }

    /// The principal name of a distinguished name: the first rule that applies.
    pub fn apply(&self, dn: &str) -> Result<String, PrincipalError> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    whole,
                    pattern,
                    replacement,
                    case,
                } => {
                    if !whole.is_match(dn) {
                        continue;
                    }
                    let name = pattern.replace_all(dn, replacement.as_str());
                    return Ok(match case {
                        Case::Keep => name.into_owned(),
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    });
                }
            }
        }
        Err(PrincipalError::NoRuleApplies(dn.to_string()))
    }

    /// `User:<name>` for the client certificate `der` (the leaf of the chain presented).
    pub fn principal(&self, der: &[u8]) -> Result<String, PrincipalError> {
        Ok(format!("User:{}", self.apply(&subject_rfc2253(der)?)?))
    }
}

/// The text up to the next unescaped '/', with `\/` taken as '/', and what follows it.
fn until_slash(s: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '\\' if s[i + 1..].starts_with('/') => {
                out.push('/');
                chars.next();
            }
            '/' => return Some((out, &s[i + 1..])),
            c => out.push(c),
        }
    }
    None
}

/// Java's replacement syntax (`$1`, `\$`, `\\`) in the regex crate's (`${1}`, `$$`, `\`).
fn java_replacement(java: &str) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            '$' => {
                let mut group = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    group.push(*d);
                    chars.next();
                }
                if group.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{group}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

/// Java's RFC 2253 keywords, by attribute OID.
const KEYWORDS: &[(&str, &str)] = &[
    ("2.5.4.3", "CN"),
    ("2.5.4.6", "C"),
    ("2.5.4.7", "L"),
    ("2.5.4.8", "ST"),
    ("2.5.4.9", "STREET"),
    ("2.5.4.10", "O"),
    ("2.5.4.11", "OU"),
    ("0.9.2342.19200300.100.1.25", "DC"),
    ("0.9.2342.19200300.100.1.1", "UID"),
];

/// The subject of the certificate `der` as RFC 2253 writes it.
pub fn subject_rfc2253(der: &[u8]) -> Result<String, PrincipalError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, cert) =
        X509Certificate::from_der(der).map_err(|e| PrincipalError::Certificate(e.to_string()))?;
    let rdns: Vec<String> = cert
        .subject()
        .iter_rdn()
        .map(|rdn| {
            rdn.iter()
                .map(|atv| {
                    let oid = atv.attr_type().to_id_string();
                    match KEYWORDS.iter().find(|(o, _)| *o == oid) {
                        Some((_, keyword)) => match atv.as_str() {
                            Ok(text) => format!("{keyword}={}", escape(text)),
                            Err(_) => format!("{keyword}=#{}", hex_der(atv.attr_value())),
                        },
                        None => format!("{oid}=#{}", hex_der(atv.attr_value())),
                    }
                })
                .collect::<Vec<_>>()
                .join("+")
        })
        .collect();
    // RFC 2253 writes the most specific RDN first: the reverse of the sequence.
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// RFC 2253's escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && (c == '#' || c == ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// An attribute value's whole DER encoding (tag, length, content) in hex, as RFC 2253
/// writes values it has no string form for.
fn hex_der(value: &x509_parser::der_parser::asn1_rs::Any<'_>) -> String {
    let content = value.data;
    let mut der = vec![value.header.tag().0 as u8];
    let len = content.len();
    if len < 0x80 {
        der.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        der.push(0x80 | bytes.len() as u8);
        der.extend(bytes);
    }
    der.extend_from_slice(content);
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_keeps_the_name() {
        let m = PrincipalMapping::default();
        assert_eq!(m.apply("CN=alice,OU=eng").as_deref(), Ok("CN=alice,OU=eng"));
    }

    #[test]
    fn kafkas_documented_rules() {
        let m = PrincipalMapping::parse(
            r"RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L, RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U, DEFAULT",
        )
        .expect("rules");
        assert_eq!(
            m.apply("CN=kafka-server1,OU=ServiceUsers,O=org,C=US")
                .as_deref(),
            Ok("kafka-server1")
        );
        assert_eq!(
            m.apply("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US")
                .as_deref(),
            Ok("duke@javasoft")
        );
        assert_eq!(
            m.apply("cn=duke,ou=javasoft,dc=sun,dc=com").as_deref(),
            Ok("DUKE@JAVASOFT")
        );
        assert_eq!(
            m.apply("OU=other").as_deref(),
            Ok("OU=other"),
            "DEFAULT last"
        );
    }

    #[test]
    fn no_rule_applying_refuses_and_slashes_can_be_escaped() {
        let m = PrincipalMapping::parse(r"RULE:^CN=([^,]*)\/x,.*$/$1/").expect("rules");
        assert_eq!(m.apply("CN=a/x,O=o").as_deref(), Ok("a"));
        assert!(matches!(
            m.apply("CN=b,O=o"),
            Err(PrincipalError::NoRuleApplies(_))
        ));
        assert!(
            PrincipalMapping::parse("RULE:^CN=(.*$/$1/").is_err(),
            "a bad pattern"
        );
        assert!(PrincipalMapping::parse("NOPE").is_err());
    }

    #[test]
    fn java_replacements_become_the_regex_crates() {
        assert_eq!(java_replacement("$1"), "${1}");
        assert_eq!(java_replacement("$1abc"), "${1}abc");
        assert_eq!(java_replacement(r"\$1"), "$$1");
        assert_eq!(java_replacement("$12x"), "${12}x");
    }

    #[test]
    fn values_are_escaped_as_rfc_2253_says() {
        assert_eq!(escape("a,b"), r"a\,b");
        assert_eq!(escape("#x "), r"\#x\ ");
        assert_eq!(escape("plain"), "plain");
    }
}
