//! Kafka's unsecured OAUTHBEARER validator (`OAuthBearerUnsecuredValidatorCallbackHandler`,
//! KIP-255), for development setups and clients' own tests: a token is an unsigned JWT
//! (`alg: none`) whose claims say who the client is. Anyone can write one for any user,
//! so the broker serves it only where an operator names the handler explicitly
//! (`listener.name.<l>.oauthbearer.sasl.server.callback.handler.class`), never by default
//! as Kafka does, and says so loudly at start.
//!
//! Invariants — the checks are Kafka's, in its order:
//! - the token is three dot-separated parts (the last, the signature, empty), the first
//!   two base64url JSON objects, the header's `alg` exactly `"none"`;
//! - `exp` is a number of seconds (fractions allowed) and the principal claim (option
//!   `unsecuredValidatorPrincipalClaimName`, default `sub`) a non-blank string;
//! - `iat`, when present, is not after now plus the allowed skew
//!   (`unsecuredValidatorAllowableClockSkewMs`, default 0); `exp` is after now less the
//!   skew, and after `iat`;
//! - every scope of `unsecuredValidatorRequiredScope` (space-separated) is in the scope
//!   claim (`unsecuredValidatorScopeClaimName`, default `scope`: a string or a list);
//! - `nbf`, `aud` and `iss` are not checked (Kafka's validator does not check them).

use crate::sasl::token::{shown, Refused, TokenError, ValidToken};
use base64::alphabet::URL_SAFE;
use base64::engine::general_purpose::GeneralPurpose;
use base64::engine::{DecodePaddingMode, GeneralPurposeConfig};
use base64::Engine;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The class name an operator gives to opt in, as Kafka names it.
pub const HANDLER_CLASS: &str =
    "org.apache.kafka.common.security.oauthbearer.internals.unsecured.OAuthBearerUnsecuredValidatorCallbackHandler";

/// Base64url as Java's URL decoder reads it: padding allowed, not required.
const B64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The latest `exp` taken as it is (seconds); a later one is taken as this.
const LATEST_DATE_S: f64 = (1u64 << 40) as f64;

/// The validator of one listener, from its JAAS options.
#[derive(Debug, Clone, PartialEq)]
pub struct UnsecuredValidator {
    principal_claim: String,
    scope_claim: String,
    required_scope: BTreeSet<String>,
    clock_skew_ms: u64,
}

impl UnsecuredValidator {
    /// From the `unsecuredValidator*` options of the listener's OAUTHBEARER JAAS entry
    /// (none at all is Kafka's defaults).
    pub fn from_options(options: &BTreeMap<String, String>) -> Result<UnsecuredValidator, String> {
        let get = |k: &str| options.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        let clock_skew_ms = match get("unsecuredValidatorAllowableClockSkewMs") {
            None => 0,
            Some(v) => v.parse::<u32>().map(u64::from).map_err(|_| {
                "unsecuredValidatorAllowableClockSkewMs must be a whole number of milliseconds, at least 0".to_string()
            })?,
        };
        Ok(UnsecuredValidator {
            principal_claim: get("unsecuredValidatorPrincipalClaimName")
                .unwrap_or("sub")
                .to_string(),
            scope_claim: get("unsecuredValidatorScopeClaimName")
                .unwrap_or("scope")
                .to_string(),
            required_scope: get("unsecuredValidatorRequiredScope")
                .unwrap_or("")
                .split_whitespace()
                .map(str::to_string)
                .collect(),
            clock_skew_ms,
        })
    }

    /// Checks `token` at time `now`.
    pub fn validate(&self, token: &str, now: SystemTime) -> Result<ValidToken, Refused> {
        let claims = unsecured_claims(token)?;
        let exp = seconds(&claims, "exp")?.ok_or(TokenError::Missing("exp".into()))?;
        let subject = match claims.get(&self.principal_claim) {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            None | Some(Value::String(_)) => {
                return Err(TokenError::Missing(self.principal_claim.clone()).into())
            }
            Some(_) => {
                return Err(TokenError::Claim(self.principal_claim.clone(), "not a string").into())
            }
        };
        let refused = |error| Refused {
            error,
            subject: Some(subject.clone()),
        };
        let iat = seconds(&claims, "iat")?;
        let now_ms = now
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64() * 1000.0)
            .unwrap_or(0.0);
        let skew = self.clock_skew_ms as f64;
        let skew_s = self.clock_skew_ms / 1000;
        if let Some(iat) = iat {
            if iat * 1000.0 > now_ms + skew {
                return Err(refused(TokenError::IssuedInFuture {
                    iat: iat as i64,
                    now: (now_ms / 1000.0) as i64,
                    skew: skew_s,
                }));
            }
        }
        if now_ms - skew >= exp * 1000.0 {
            return Err(refused(TokenError::Expired {
                exp: exp as i64,
                now: (now_ms / 1000.0) as i64,
                skew: skew_s,
            }));
        }
        if let Some(iat) = iat {
            if exp <= iat {
                return Err(refused(TokenError::ExpiresBeforeIssued {
                    exp: (exp * 1000.0) as i64,
                    iat: (iat * 1000.0) as i64,
                }));
            }
        }
        if !self.required_scope.is_empty() {
            let scope = scope(&claims, &self.scope_claim).map_err(refused)?;
            if let Some(lacking) = self.required_scope.iter().find(|s| !scope.contains(*s)) {
                return Err(refused(TokenError::Scope(shown(lacking))));
            }
        }
        Ok(ValidToken {
            subject,
            expires: UNIX_EPOCH + Duration::from_secs_f64(exp.clamp(0.0, LATEST_DATE_S)),
        })
    }
}

/// The claims of an unsecured JWS: `base64url(header).base64url(claims).` with the
/// header's `alg` "none" and no signature.
fn unsecured_claims(token: &str) -> Result<Map<String, Value>, TokenError> {
    if token.contains("..") {
        return Err(TokenError::Malformed("an empty part"));
    }
    let parts: Vec<&str> = token.split('.').collect();
    let [header, claims, signature] = parts[..] else {
        return Err(TokenError::Malformed("not three dot-separated parts"));
    };
    let header = json_object(header, "its header is not base64url JSON")?;
    match header.get("alg") {
        Some(Value::String(alg)) if alg == "none" => {}
        Some(Value::String(alg)) => return Err(TokenError::Algorithm(shown(alg))),
        Some(_) => return Err(TokenError::NotUnsecured("alg is not a string")),
        None => return Err(TokenError::NotUnsecured("no alg")),
    }
    if !signature.is_empty() {
        return Err(TokenError::NotUnsecured("it is signed"));
    }
    json_object(claims, "its payload is not base64url JSON")
}

fn json_object(part: &str, what: &'static str) -> Result<Map<String, Value>, TokenError> {
    let bytes = B64URL
        .decode(part)
        .map_err(|_| TokenError::Malformed(what))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(TokenError::Malformed(what)),
    }
}

/// A NumericDate claim in seconds, fractions kept (Kafka reads them as doubles).
fn seconds(claims: &Map<String, Value>, name: &str) -> Result<Option<f64>, TokenError> {
    match claims.get(name) {
        None => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() => Ok(Some(f)),
            _ => Err(TokenError::Claim(name.into(), "not a number")),
        },
        Some(_) => Err(TokenError::Claim(name.into(), "not a number")),
    }
}

/// The token's scope: a string claim is one scope (trimmed); a list, its non-blank
/// entries; no claim, none.
fn scope(claims: &Map<String, Value>, name: &str) -> Result<BTreeSet<String>, TokenError> {
    match claims.get(name) {
        None => Ok(BTreeSet::new()),
        Some(Value::String(s)) => Ok([s.trim().to_string()].into_iter().collect()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| match v {
                Value::String(s) => Ok(s.trim().to_string()),
                _ => Err(TokenError::Claim(
                    name.into(),
                    "a list of other than strings",
                )),
            })
            .filter(|s| !matches!(s, Ok(s) if s.is_empty()))
            .collect(),
        Some(_) => Err(TokenError::Claim(
            name.into(),
            "neither a string nor a list",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use serde_json::json;

    fn token(header: &Value, claims: &Value, signature: &str) -> String {
        format!(
            "{}.{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string()),
            signature
        )
    }

    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    fn defaults() -> UnsecuredValidator {
        UnsecuredValidator::from_options(&BTreeMap::new()).unwrap()
    }

    fn refused(v: &UnsecuredValidator, t: &str, now: f64) -> TokenError {
        v.validate(t, at(now)).expect_err("refused").error
    }

    #[test]
    fn the_token_kafkas_and_librdkafkas_login_handlers_make_is_accepted() {
        // Kafka's: float seconds, a trailing dot. librdkafka's: a list scope.
        let none = json!({"alg": "none"});
        let java = token(
            &none,
            &json!({"exp": 1003.5, "iat": 1000.25, "sub": "alice"}),
            "",
        );
        let ok = defaults().validate(&java, at(1001.0)).unwrap();
        assert_eq!(ok.subject, "alice");
        assert_eq!(ok.expires, at(1003.5));
        let rdkafka = token(
            &none,
            &json!({"sub": "bob", "iat": 1000.0, "exp": 4600.0, "scope": ["a", "b"]}),
            "",
        );
        assert_eq!(
            defaults().validate(&rdkafka, at(1001.0)).unwrap().subject,
            "bob"
        );
        // Base64 with padding, as some hand-made tokens have it.
        let padded = format!(
            "{}.{}.",
            base64::engine::general_purpose::URL_SAFE.encode(none.to_string()),
            base64::engine::general_purpose::URL_SAFE
                .encode(json!({"exp": 2000, "sub": "c"}).to_string())
        );
        assert_eq!(
            defaults().validate(&padded, at(1000.0)).unwrap().subject,
            "c"
        );
    }

    #[test]
    fn signed_or_malformed_tokens_are_refused() {
        let claims = json!({"exp": 2000, "sub": "alice"});
        let v = defaults();
        assert!(matches!(
            refused(&v, &token(&json!({"alg": "HS256"}), &claims, ""), 1000.0),
            TokenError::Algorithm(_)
        ));
        assert!(matches!(
            refused(&v, &token(&json!({"alg": "none"}), &claims, "c2ln"), 1000.0),
            TokenError::NotUnsecured(_)
        ));
        assert!(matches!(
            refused(&v, &token(&json!({}), &claims, ""), 1000.0),
            TokenError::NotUnsecured(_)
        ));
        for bad in [
            "",
            "a.b",
            "a..b",
            "!!.??.",
            "e30.e30.e30.",
            "bm90IGpzb24.e30.",
        ] {
            assert!(
                matches!(refused(&v, bad, 1000.0), TokenError::Malformed(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn claims_and_times_are_held_to_kafkas_rules() {
        let none = json!({"alg": "none"});
        let v = defaults();
        let t = |c: Value| token(&none, &c, "");
        assert_eq!(
            refused(&v, &t(json!({"sub": "a"})), 1000.0),
            TokenError::Missing("exp".into())
        );
        assert!(matches!(
            refused(&v, &t(json!({"exp": "2000", "sub": "a"})), 1000.0),
            TokenError::Claim(..)
        ));
        assert_eq!(
            refused(&v, &t(json!({"exp": 2000})), 1000.0),
            TokenError::Missing("sub".into())
        );
        assert_eq!(
            refused(&v, &t(json!({"exp": 2000, "sub": " "})), 1000.0),
            TokenError::Missing("sub".into())
        );
        assert!(matches!(
            refused(&v, &t(json!({"exp": 2000, "sub": 7})), 1000.0),
            TokenError::Claim(..)
        ));
        assert!(matches!(
            refused(&v, &t(json!({"exp": 1000, "sub": "a"})), 1000.0),
            TokenError::Expired { .. }
        ));
        assert!(matches!(
            refused(
                &v,
                &t(json!({"exp": 3000, "iat": 1001, "sub": "a"})),
                1000.0
            ),
            TokenError::IssuedInFuture { .. }
        ));
        // nbf, aud and iss are not Kafka's unsecured validator's business.
        assert!(v
            .validate(
                &t(json!({"exp": 2000, "sub": "a", "nbf": 5000, "aud": "x"})),
                at(1000.0)
            )
            .is_ok());

        let skewed = UnsecuredValidator::from_options(&BTreeMap::from([(
            "unsecuredValidatorAllowableClockSkewMs".to_string(),
            "2000".to_string(),
        )]))
        .unwrap();
        assert!(matches!(
            refused(
                &skewed,
                &t(json!({"exp": 999, "iat": 1001, "sub": "a"})),
                1000.0
            ),
            TokenError::ExpiresBeforeIssued { .. }
        ));
        assert!(skewed
            .validate(
                &t(json!({"exp": 1001, "iat": 1001.5, "sub": "a"})),
                at(1000.0)
            )
            .is_err());
        assert!(skewed
            .validate(
                &t(json!({"exp": 1002, "iat": 1001.5, "sub": "a"})),
                at(1000.0)
            )
            .is_ok());
        assert!(
            skewed
                .validate(&t(json!({"exp": 999, "sub": "a"})), at(1000.0))
                .is_ok(),
            "within the skew"
        );
    }

    #[test]
    fn options_name_the_claims_and_the_required_scope() {
        let v = UnsecuredValidator::from_options(&BTreeMap::from([
            (
                "unsecuredValidatorPrincipalClaimName".to_string(),
                "user".to_string(),
            ),
            (
                "unsecuredValidatorScopeClaimName".to_string(),
                "roles".to_string(),
            ),
            (
                "unsecuredValidatorRequiredScope".to_string(),
                "read  write".to_string(),
            ),
        ]))
        .unwrap();
        let none = json!({"alg": "none"});
        let ok = token(
            &none,
            &json!({"exp": 2000, "user": "u", "roles": ["read", "write", ""]}),
            "",
        );
        assert_eq!(v.validate(&ok, at(1000.0)).unwrap().subject, "u");
        let lacking = token(
            &none,
            &json!({"exp": 2000, "user": "u", "roles": "read"}),
            "",
        );
        let e = v.validate(&lacking, at(1000.0)).unwrap_err();
        assert_eq!(e.error, TokenError::Scope("\"write\"".into()));
        assert_eq!(e.subject.as_deref(), Some("u"));
        assert!(UnsecuredValidator::from_options(&BTreeMap::from([(
            "unsecuredValidatorAllowableClockSkewMs".to_string(),
            "-1".to_string()
        )]))
        .is_err());
    }
}
