//! What every launch script shares: strict mode, the job's nodes from the environment with a
//! one-node default, a check that they add up to the plan's world, and flags as a bash array.

/// The opening of a launch script: the comment and how the job's nodes are set,
/// `set -euo pipefail`, the script's own directory as `$here`, and `$nnodes`, `$nproc`,
/// `$node_rank`, `$master_addr`, `$master_port`.
pub fn prologue(comment: &[String], world: u64, default_port: u16) -> String {
    let mut out = String::from("#!/usr/bin/env bash\n");
    let nodes = "Multi-node: set NNODES, NODE_RANK, MASTER_ADDR, MASTER_PORT (and NPROC_PER_NODE) on every node.";
    for line in comment.iter().map(String::as_str).chain([nodes]) {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            out.push_str(&format!("# {line}\n"));
        }
    }
    out.push_str(&format!(
        r#"set -euo pipefail
here="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
world={world}
nnodes="${{NNODES:-1}}"
nproc="${{NPROC_PER_NODE:-$(( world / nnodes ))}}"
if (( nnodes * nproc != world )); then
    echo "$0: the plan needs $world processes, NNODES=$nnodes x NPROC_PER_NODE=$nproc gives $(( nnodes * nproc ))" >&2
    exit 2
fi
node_rank="${{NODE_RANK:-0}}"
master_addr="${{MASTER_ADDR:-127.0.0.1}}"
master_port="${{MASTER_PORT:-{default_port}}}"
"#
    ));
    out
}

/// torchrun as a launch script calls it unless `$TORCHRUN` names another.
pub const TORCHRUN: &str = r#""${TORCHRUN:-torchrun}""#;

/// The script's last line: `launcher` (torchrun or a command that acts as it) over the job the
/// prologue describes, running `script` with `args`.
pub fn torchrun(launcher: &str, script: &str, args: &str) -> String {
    format!(
        "exec {launcher} --nnodes \"$nnodes\" --node-rank \"$node_rank\" --master-addr \"$master_addr\" \\\n    \
         --master-port \"$master_port\" --nproc-per-node \"$nproc\" \\\n    {script} {args}\n"
    )
}

/// One command-line flag and its value, if it takes one.
#[derive(Clone, Debug, PartialEq)]
pub struct Flag {
    pub name: String,
    pub value: Option<String>,
}

pub fn flag(name: &str, value: impl ToString) -> Flag {
    Flag { name: name.into(), value: Some(value.to_string()) }
}

pub fn switch(name: &str) -> Flag {
    Flag { name: name.into(), value: None }
}

/// `name=(` one flag per line `)`: a value that is not a plain word is single-quoted, unless
/// it is an expansion the script means (`"$here/..."`, `"${VAR:?...}"`), which is kept as is.
pub fn array(name: &str, flags: &[Flag]) -> String {
    let mut out = format!("{name}=(\n");
    for f in flags {
        match &f.value {
            Some(v) => out.push_str(&format!("    {} {}\n", f.name, quote(v))),
            None => out.push_str(&format!("    {}\n", f.name)),
        }
    }
    out.push_str(")\n");
    out
}

fn quote(value: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./,:=+".contains(c);
    if value.starts_with('"') || value.chars().all(plain) && !value.is_empty() {
        value.to_string()
    } else {
        format!("'{}'", value.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_only_when_the_shell_would_read_them() {
        let text = array(
            "args",
            &[flag("--num-layers", 32), flag("--layout", "Et*2|t*4L"), flag("--data", "\"$here/x\""), switch("--bf16")],
        );
        assert_eq!(
            text,
            "args=(\n    --num-layers 32\n    --layout 'Et*2|t*4L'\n    --data \"$here/x\"\n    --bf16\n)\n"
        );
    }
}
