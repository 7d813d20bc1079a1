//! Kafka's `sasl.jaas.config` value for the broker's PLAIN mechanism:
//! `org.apache.kafka.common.security.plain.PlainLoginModule required
//! username="admin" password="…" user_admin="…" user_alice="…";` — the `user_<name>`
//! options are the users PLAIN accepts and their passwords.
//!
//! A pure parser: options are `key="value"` (backslash escapes the next character),
//! separated by white space, after the login module's class and control flag, ended by
//! `;`. Errors never quote a value (they are passwords).

use std::collections::BTreeMap;

/// The options of a JAAS login module entry.
pub fn options(config: &str) -> Result<BTreeMap<String, String>, String> {
    let mut rest = config.trim();
    let mut words = 0;
    // The login module class and the control flag.
    while words < 2 {
        // The flag may end the entry at once: `… required;` has no options.
        let end = rest
            .find(|c: char| c.is_whitespace() || (words == 1 && c == ';'))
            .ok_or("sasl.jaas.config names no login module and control flag")?;
        rest = rest[end..].trim_start();
        words += 1;
    }
    let mut out = BTreeMap::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() || rest == ";" {
            return Ok(out);
        }
        let eq = rest
            .find('=')
            .ok_or("sasl.jaas.config: an option without '='")?;
        let key = rest[..eq].trim().to_string();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err("sasl.jaas.config: a malformed option name".into());
        }
        rest = &rest[eq + 1..];
        let mut chars = rest.char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err(format!("sasl.jaas.config: option {key} is not quoted"));
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            if escaped {
                value.push(c);
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                end = Some(i);
                break;
            } else {
                value.push(c);
            }
        }
        let end = end.ok_or_else(|| format!("sasl.jaas.config: option {key} is not closed"))?;
        rest = &rest[end + 1..];
        out.insert(key, value);
    }
}

/// The PLAIN users (`user_<name>` options) and their passwords.
pub fn plain_users(config: &str) -> Result<BTreeMap<String, String>, String> {
    Ok(options(config)?
        .into_iter()
        .filter_map(|(k, v)| k.strip_prefix("user_").map(|u| (u.to_string(), v)))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafkas_plain_login_module_entry() {
        let users = plain_users(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required
               username="admin" password="admin-secret"
               user_admin="admin-secret" user_alice="al\"ice";"#,
        )
        .expect("parses");
        assert_eq!(users.len(), 2);
        assert_eq!(users["alice"], "al\"ice");
        for bad in [
            "x",
            "m required user_a=unquoted;",
            "m required user_a=\"open;",
        ] {
            let e = plain_users(bad).expect_err(bad);
            assert!(!e.contains("open"), "no value in errors: {e}");
        }
    }

    #[test]
    fn an_entry_without_options_has_none() {
        for entry in [
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;",
            "m required ;",
        ] {
            assert_eq!(options(entry), Ok(BTreeMap::new()), "{entry}");
        }
    }
}
