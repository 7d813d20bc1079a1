//! The configuration reference, `docs/configuration.md`, generated from the broker's own
//! definitions of its settings so that none goes undocumented and none drifts:
//! - the start-up settings are `corelog serve`'s flags (`config::ServeArgs`: names and
//!   documentation from clap, which reads the doc comments), each also a key of the
//!   configuration file, with the Kafka keys its serde attributes name and the type its
//!   declaration gives (both read from `config.rs`; each alias is checked to be one the
//!   file parser takes, `config::file_takes`);
//! - the topic configurations and their broker-wide defaults (`topic_config::DEFS`), the
//!   dynamic broker keys without a topic key (`topic_config::BROKER_ONLY_DEFS`), the
//!   security keys (`security_config::KEYS`) and the rest of Kafka's broker vocabulary
//!   (`kafka_broker_keys`, generated from Kafka's own `ConfigDef`).
//!
//! `docs_configuration_md_is_current` (below) fails when the file differs from what
//! `markdown` gives; `CORELOG_WRITE_DOCS=1 cargo test -p corelog --lib config_reference`
//! rewrites it.

use crate::config::{file_takes, ServeArgs};
use clap::{Args, Command};
use corelog_shards::kafka_broker_keys::{self, Update};
use corelog_shards::topic_config;
use std::collections::BTreeMap;
use std::fmt::Write;

/// Each `ServeArgs` field's declared type and the Kafka keys its serde attributes name
/// (`alias = "..."`), from its declaration in `config.rs`.
fn fields() -> BTreeMap<String, (String, Vec<String>)> {
    let source = include_str!("config.rs");
    let start = source
        .find("pub struct ServeArgs {")
        .expect("ServeArgs is declared in config.rs");
    let body = &source[start + "pub struct ServeArgs {".len()..];
    let body = &body[..body.find("\n}\n").expect("ServeArgs ends")];
    let mut out = BTreeMap::new();
    let mut aliases = Vec::new();
    for line in body.lines().map(str::trim) {
        let mut rest = line;
        while let Some(at) = rest.find("alias = \"") {
            let tail = &rest[at + "alias = \"".len()..];
            let Some(end) = tail.find('"') else { break };
            aliases.push(tail[..end].to_string());
            rest = &tail[end..];
        }
        let Some(decl) = line.strip_prefix("pub ") else {
            continue;
        };
        let Some((name, ty)) = decl.split_once(": ") else {
            continue;
        };
        let ty = ty.trim_end_matches(',');
        let ty = ty
            .strip_prefix("Option<")
            .and_then(|t| t.strip_suffix('>'))
            .unwrap_or(ty);
        out.insert(
            name.to_string(),
            (ty.to_string(), std::mem::take(&mut aliases)),
        );
    }
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `docs/configuration.md`.
pub fn markdown() -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(
        w,
        "# Configuration reference\n\n\
         Generated from the broker's definitions of its settings by `src/config_reference.rs`\n\
         (`CORELOG_WRITE_DOCS=1 cargo test -p corelog --lib config_reference` rewrites it; the\n\
         same test fails when it is out of date). How to give them: [deployment](deployment.md).\n\n\
         - [Start-up settings](#start-up-settings): `corelog serve`'s flags and the\n  \
           configuration file's keys; read at start.\n\
         - [Topic configurations](#topic-configurations): per topic, and their broker-wide\n  \
           defaults; dynamic.\n\
         - [Dynamic broker keys](#dynamic-broker-keys) without a topic key.\n\
         - [Security keys](#security-keys).\n\
         - [Kafka's other broker keys](#kafkas-other-broker-keys): accepted, described, not acted on.\n"
    );

    let _ = writeln!(
        w,
        "## Start-up settings\n\n\
         Every flag of `corelog serve` is also a key of the configuration file (`--config`):\n\
         the flag's name without its dashes (`data-dir = \"./data\"`), or the Kafka key it\n\
         takes where it has one. A flag wins over the file. They are read at start: a change\n\
         takes a restart. Defaults are in each description.\n\n\
         | Flag / file key | Kafka key | Type | What it sets |\n|---|---|---|---|"
    );
    let fields = fields();
    let serve = ServeArgs::augment_args(Command::new("serve"));
    for arg in serve.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        let field = arg.get_id().as_str().to_string();
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| one_line(&h.to_string()))
            .unwrap_or_default();
        let (ty, aliases) = fields
            .get(&field)
            .map(|(t, a)| (t.as_str(), a.as_slice()))
            .unwrap_or(("", &[]));
        // Each alias is one the file parser takes (it asks the fields themselves).
        debug_assert!(aliases.iter().all(|a| file_takes(a)), "{aliases:?}");
        // A flag named as Kafka names the key (`listeners`) is that key itself.
        let own = kafka_broker_keys::lookup(long).map(|k| k.name);
        let kafka = own
            .into_iter()
            .chain(aliases.iter().map(String::as_str))
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            w,
            "| `--{long}` | {kafka} | `{}` | {help} |",
            ty.replace('|', "\\|")
        );
    }

    let _ = writeln!(
        w,
        "\n## Topic configurations\n\n\
         Set per topic (CreateTopics, `kafka-configs --entity-type topics`); the broker-wide\n\
         default is the broker key beside it, set at start (`--topic-default KEY=VALUE`, or\n\
         the key in the file) or while running for the whole cluster or one broker\n\
         (`kafka-configs --entity-type brokers`).\n\n\
         | Topic key | Broker-wide default | Type | What it sets |\n|---|---|---|---|"
    );
    for d in topic_config::DEFS {
        let broker = d.broker_name.map(|b| format!("`{b}`")).unwrap_or_default();
        let _ = writeln!(
            w,
            "| `{}` | {broker} | {} | {} |",
            d.name,
            d.config_type.kafka_name(),
            one_line(d.doc)
        );
    }

    let _ = writeln!(
        w,
        "\n## Dynamic broker keys\n\n\
         Broker keys no topic inherits, set while running (`kafka-configs --entity-type\n\
         brokers`).\n\n\
         | Key | Type | Default | What it sets |\n|---|---|---|---|"
    );
    for d in topic_config::BROKER_ONLY_DEFS {
        let _ = writeln!(
            w,
            "| `{}` | {} | `{}` | {} |",
            d.name,
            d.config_type.kafka_name(),
            d.default,
            one_line(d.doc)
        );
    }

    let _ = writeln!(
        w,
        "\n## Security keys\n\n\
         Kafka's keys with Kafka's meaning ([security](security.md)), read at start: in the\n\
         file (quoted dotted keys, or a `[listener.name.<name>]` table for one listener) or\n\
         as `--security KEY=VALUE`, which wins.\n"
    );
    for key in crate::security_config::KEYS {
        let _ = writeln!(w, "- `{key}`");
    }

    let _ = writeln!(
        w,
        "\n## Kafka's other broker keys\n\n\
         The rest of Apache Kafka {}'s broker vocabulary: taken in the file (checked as Kafka\n\
         parses its type) and, where Kafka lets it change while running, through\n\
         AlterConfigs; described by DescribeConfigs with its value and Kafka's default; logged\n\
         once as not acted on.\n\n\
         | Key | Type | Kafka's default | Changes while running |\n|---|---|---|---|",
        kafka_broker_keys::KAFKA_VERSION
    );
    for key in kafka_broker_keys::all() {
        let acted_on = file_takes(key.name)
            || crate::security_config::KEYS.contains(&key.name)
            || topic_config::def_by_broker_name(key.name).is_some()
            || topic_config::broker_only_def(key.name).is_some();
        if acted_on {
            continue;
        }
        let update = match key.update {
            Update::ReadOnly => "no",
            Update::PerBroker => "per broker",
            Update::ClusterWide => "cluster-wide or per broker",
        };
        let default = match key.default {
            Some(_) if key.sensitive() => "(secret)".into(),
            Some(d) => format!("`{}`", d.replace('|', "\\|")),
            None => "none".into(),
        };
        let _ = writeln!(
            w,
            "| `{}` | {} | {default} | {update} |",
            key.name,
            key.config_type.kafka_name()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_configuration_md_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
        let want = markdown();
        if std::env::var_os("CORELOG_WRITE_DOCS").is_some() {
            std::fs::write(&path, &want).expect("writing docs/configuration.md");
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/configuration.md is not what the settings' definitions give: run \
             CORELOG_WRITE_DOCS=1 cargo test -p corelog --lib config_reference"
        );
    }

    #[test]
    fn every_flag_is_documented_and_kafka_keys_land_on_their_fields() {
        let doc = markdown();
        let serve = ServeArgs::augment_args(Command::new("serve"));
        for arg in serve.get_arguments() {
            if let Some(long) = arg.get_long() {
                assert!(doc.contains(&format!("| `--{long}` |")), "--{long}");
                assert!(
                    arg.get_help().is_some(),
                    "--{long} has no doc comment to document it"
                );
            }
        }
        let fields = fields();
        assert_eq!(fields["num_partitions"].1, ["num.partitions"]);
        assert_eq!(fields["super_users"].1, ["super.users"]);
        assert!(fields["data_dir"].1.is_empty());
        assert_eq!(fields["log_dirs"].1, ["log.dirs"]);
        // Every Kafka key a field takes is named beside it.
        for key in kafka_broker_keys::all() {
            if file_takes(key.name) && !crate::security_config::KEYS.contains(&key.name) {
                let own = fields.contains_key(&key.name.replace('-', "_"));
                assert!(
                    own || fields
                        .values()
                        .any(|(_, a)| a.iter().any(|n| n == key.name)),
                    "{} is taken by the file but documented nowhere",
                    key.name
                );
            }
        }
    }
}
