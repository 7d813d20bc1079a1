//! Names the commit the broker is built from, for `corelog --version` and the start-up
//! log: `CORELOG_COMMIT` is the first 12 hex digits of HEAD, or "unknown" outside a git
//! checkout (a source tarball). Rebuilt when HEAD moves, so the name is never stale.

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

fn main() {
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=CORELOG_COMMIT={commit}");
    // HEAD itself, the branch it names, and packed refs: whichever moves on a commit.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/packed-refs");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
