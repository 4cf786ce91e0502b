"""docs/options.md, generated from the option table (``python -m evdb.options --markdown``)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from evdb.options.spec import ENV_PREFIX, GROUPS, OptionSpec
from evdb.options.table import OPTIONS
from evdb.options.values import FALSE_WORDS, TRUE_WORDS, format_size

__all__ = ["main", "render_markdown"]

_INTRO = f"""\
# Node options

<!-- Generated from evdb/options/table.py by `python -m evdb.options --markdown > docs/options.md`;
     tests/test_options.py fails when this file and the table differ. -->

Every option of `evdb node` has three forms, all derived from its PascalCase name:

| Form | Example | Where |
|---|---|---|
| YAML key | `ChunkSize: 64MiB` | the file named by `--config FILE` (or `{ENV_PREFIX}CONFIG`) |
| Environment variable | `{ENV_PREFIX}CHUNK_SIZE=64MiB` | the node's environment |
| Command line | `--chunk-size 64MiB` or `--chunk-size=64MiB` | `evdb node ...` |

**Precedence:** command line > environment > YAML file > default. The node logs every option that is
not at its default, with the source it came from (`yaml`, `env`, `command line`); the licence key is
masked.

## Values

- **Booleans** accept {"/".join(TRUE_WORDS)} and {"/".join(FALSE_WORDS)}, in any case. On the command
  line a flag alone means true (`--mem-db`); `--mem-db=false` and `--mem-db false` work too.
- **Integers** are plain decimal numbers (`2113`, `-1`); **numbers** may have a fraction (`0.5`).
- **Sizes** are a number of bytes: a plain integer (`65536`) or an integer with a suffix, with or
  without a space: `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024) or `KB`, `MB`, `GB`, `TB` (powers of 1000),
  in any case (`64MiB` = `67108864`). Fractions (`1.5GiB`) are not accepted.
- **Enums** accept their values in any case (`--log-level debug`) and are shown in their canonical spelling.
- **Paths** are used as given; relative paths are relative to the node's working folder; `~` is expanded.
- **IP addresses** are IPv4 or IPv6 literals; host names are not accepted.
- An option whose default is *not set* also accepts an empty value (or a YAML `~`) for "not set".

## The YAML file

- A mapping of option names to values. Names are matched without regard to case.
- Nested mappings join their keys: `AutoScavenge: {{Enabled: false}}` (or the block form below) sets
  `AutoScavengeEnabled`; the flat key `AutoScavengeEnabled: false` is accepted too, but not both at once.
- A key with no value (`Index:` or `Index: ~`) leaves the option as if it were absent.
- A key written twice, an unknown key, and `Config` itself are errors.

```yaml
Db: /var/lib/evdb/db
Index: /var/lib/evdb/index
HttpIp: 0.0.0.0
LogLevel: Information
CertificateFile: /etc/evdb/certs/node.crt
CertificatePrivateKeyFile: /etc/evdb/certs/node.key
TrustedRootCertificatesPath: /etc/evdb/certs/ca
AutoScavenge:
  Enabled: false
```

## The environment

- Every variable that starts with `{ENV_PREFIX}` must name an option. `__` (KurrentDB's section separator)
  is read as `_`, so `{ENV_PREFIX}AUTO_SCAVENGE__ENABLED` is `{ENV_PREFIX}AUTO_SCAVENGE_ENABLED`.
- Exception (allow-list): the service-link variables Kubernetes injects into every pod for a Service
  named `service` are ignored: `{ENV_PREFIX}SERVICE_HOST`, `{ENV_PREFIX}SERVICE_PORT`,
  `{ENV_PREFIX}SERVICE_PORT_<name>`, `{ENV_PREFIX}PORT_<port>_<TCP|UDP|SCTP>[_PROTO|_PORT|_ADDR]`, and
  `{ENV_PREFIX}PORT` when its value is a `tcp://`, `udp://` or `sctp://` address. (Refusing them would stop
  the node in such a pod, the problem reported for KurrentDB in kurrent-io/KurrentDB#3324.)

## Errors

An unknown name (in the YAML file, the environment or on the command line), a value of the wrong
type, a value out of range and an enum value that is not allowed all stop the node before it starts.
The message names the option, where the value came from and what the option accepts, and suggests the
closest name for a misspelt one. All problems are reported together. Command-line options cannot be
abbreviated.

## Reloading

`POST /admin/reloadconfig` and SIGHUP read the YAML file (and the environment) again; command-line
values stay as they were. Options marked *reloadable* take effect at once. If any other option's
value changed, or the file is invalid, the reload is refused as a whole, the node keeps its current
configuration and the error names the options that need a restart.

## Deprecated options

A deprecated option is still accepted; when it is set the node logs a warning with the note shown below.
"""


def _bound(o: OptionSpec, number: float) -> str:
    if o.type == "size" and isinstance(number, int) and number >= 1024:
        return format_size(number).replace(" bytes", "")
    return str(number)


def _accepted_cell(o: OptionSpec) -> str:
    if o.choices:
        text = "one of " + ", ".join(f"`{c}`" for c in o.choices)
        if o.unit or o.type == "size":
            text += f" ({o.unit or 'bytes'})"
    else:
        text = o.type_text
        if o.minimum is not None and o.maximum is not None:
            text += f", {_bound(o, o.minimum)} to {_bound(o, o.maximum)}"
        elif o.minimum is not None:
            text += f", at least {_bound(o, o.minimum)}"
    if o.optional:
        text += ", or not set"
    return text


def _meaning_cell(o: OptionSpec) -> str:
    text = o.meaning
    if o.reloadable:
        text += " *Reloadable.*"
    if o.deprecated:
        text += f" *Deprecated: {o.deprecated}.*"
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return f"`{text}`"


def render_markdown() -> str:
    """The body of docs/options.md."""
    lines = [_INTRO.rstrip("\n"), ""]
    for group in GROUPS:
        members = [o for o in OPTIONS if o.group == group]
        if not members:
            continue
        lines += [
            f"## {group}",
            "",
            "| YAML | Command line | Environment | Accepted | Default | Meaning |",
            "|---|---|---|---|---|---|",
        ]
        for o in members:
            lines.append(
                f"| {_code(o.yaml_key)} | {_code(o.flag)} | {_code(o.env)} | {_accepted_cell(o)} "
                f"| {_code(o.default_text)} | {_meaning_cell(o)} |"
            )
        lines.append("")
        notes = [o for o in members if o.details]
        if notes:
            lines += [f"- **`{o.name}`**: {o.details}" for o in notes]
            lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m evdb.options --markdown``: print docs/options.md."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args != ["--markdown"]:
        print("usage: python -m evdb.options --markdown > docs/options.md", file=sys.stderr)
        return 2
    sys.stdout.write(render_markdown())
    return 0
