#!/usr/bin/env bash
# Command 1: install everything ioscope needs (Debian 12, as root) and run its
# main job on the built-in demo workload.
#   install.sh --exporter-unit   prints the exporter's systemd unit for this install (what install.sh installs)
set -euo pipefail
cd "$(dirname "$0")"

# contrib/ioscope-exporter.service with the directories this install runs from bound read-only into its
# sandbox: the checkout (the venv, the code: an editable install), the venv if it lies elsewhere, and the
# prefix of the interpreter the venv's python links to (pyenv's under /root here), unless under /usr.
# PrivateTmp (implied by DynamicUser) hides /tmp and /var/tmp, PrivateDevices /dev/shm: systemd takes a
# bind's source from the host before either applies, so a clone under /tmp, /home/USER, /root, /opt or
# in a path with a space starts alike (docs/exporter.md, "systemd").
exporter_unit() {
    local dirs=() d q line binds=""
    dirs+=("$(pwd -P)")
    dirs+=("$(realpath .venv)")
    dirs+=("$(.venv/bin/python -c 'import os, sys; print(os.path.realpath(sys.base_prefix))')")
    for d in "${dirs[@]}"; do
        case "$d" in
            /usr | /usr/*) continue ;;   # ProtectSystem=strict: read-only, never hidden
            *[\"\\]* | *$'\n'*)
                echo "install.sh: $d: a path with a quote, a backslash or a new line cannot be written in a unit" >&2
                return 1 ;;
        esac
        case " $binds " in *" \"${d//%/%%}\" "*) continue ;; esac
        for q in "${dirs[@]}"; do   # one inside another listed is bound with it
            if [ "$q" != "$d" ] && [ "${d#"$q"/}" != "$d" ]; then continue 2; fi
        done
        binds+="${binds:+ }\"${d//%/%%}\""   # quoted: a space kept; % doubled (systemd's specifiers)
    done
    while IFS= read -r line; do
        if [ "$line" = "# BindReadOnlyPaths= (install.sh)" ]; then
            [ -z "$binds" ] || printf 'BindReadOnlyPaths=%s\n' "$binds"
        else
            printf '%s\n' "$line"
        fi
    done < contrib/ioscope-exporter.service
}

if [ "${1:-}" = "--exporter-unit" ]; then
    exporter_unit
    exit 0
fi
scripts/bootstrap.sh
for exe in .venv/bin/ioscope .venv/bin/ioscope-*; do   # ioscope, and ioscope-TOOL for every tool
    ln -sf "$PWD/$exe" "/usr/local/bin/$(basename "$exe")"
done
install -D -m 0644 -t /usr/local/share/doc/ioscope docs/*.md   # contrib's units name these pages
unit=$(exporter_unit)   # installed, not enabled: systemctl daemon-reload; systemctl enable --now ioscope-exporter
install -D -m 0644 /dev/stdin /usr/local/lib/systemd/system/ioscope-exporter.service <<<"$unit"
exec .venv/bin/ioscope demo
