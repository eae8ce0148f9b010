#!/usr/bin/env bash
# A real JupyterHub on this machine: students log in, get their own Jupyter server as their own Linux user, and
# fetch and submit lessons through nbgrader's exchange (the Assignment List), as a course on a hub does.
#
#   ZEROLAB_HUB_USERS="alice bob" ZEROLAB_HUB_PASSWORD=... bash scripts/hub_local.sh start
#   bash scripts/hub_local.sh url       the hub's address
#   bash scripts/hub_local.sh stop      stop the hub, its proxy and every user's server
#
# ZEROLAB_HUB_USERS are Linux users that exist (useradd); the hub starts each one's server as that user
# (JupyterHub's LocalProcessSpawner), so it runs as root. They log in with ZEROLAB_HUB_PASSWORD (JupyterHub's
# DummyAuthenticator: a trial on one machine only; a real course uses PAM, OAuth or LTI). ZEROLAB_HUB_EXCHANGE
# (default /srv/nbgrader/exchange) and ZEROLAB_HUB_COURSE (default zerolab) go into the nbgrader config every
# user's server reads (JUPYTER_CONFIG_PATH), so nothing is written to /etc. The users' servers run this checkout's
# venv with its student settings (scripts/student_jupyter.py: nbgrader's instructor UI hidden).
#
# Everything lives in one state folder, .hub/ in the checkout (ZEROLAB_HUB_DIR to move it): jupyterhub_config.py
# with ports picked free at start, the hub's database and cookie secret, logs and pids. Two checkouts on one
# machine each run their own hub. The proxy (configurable-http-proxy, from npm) is installed in .venv/hub-proxy.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
VENV="$ROOT/.venv"
STATE="${ZEROLAB_HUB_DIR:-$ROOT/.hub}"
PROXY="$VENV/hub-proxy/node_modules/.bin/configurable-http-proxy"

say() { echo "hub_local: $*" >&2; }

free_port() {
    "$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

install_if_missing() {
    if ! "$VENV/bin/python" -c 'import jupyterhub' 2>/dev/null; then
        say "JupyterHub is not in $VENV: bash scripts/setup.sh --grading installs it"
        exit 2
    fi
    [ -x "$PROXY" ] && return 0
    if ! command -v npm >/dev/null; then
        say "the hub's proxy comes from npm (configurable-http-proxy), and npm is not installed"
        exit 2
    fi
    say "installing configurable-http-proxy into $VENV/hub-proxy (npm, a few seconds)"
    # Node trusts only its own CA list; pip and apt use the system's bundle, which holds the CAs this network's TLS
    # needs (a clean environment without NODE_EXTRA_CA_CERTS saw SELF_SIGNED_CERT_IN_CHAIN and retried for minutes)
    if [ -z "${NODE_EXTRA_CA_CERTS:-}" ] && [ -f /etc/ssl/certs/ca-certificates.crt ]; then
        export NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
    fi
    mkdir -p "$STATE"
    if ! timeout 300 npm install --no-audit --no-fund --no-update-notifier --fetch-retries=1 \
            --prefix "$VENV/hub-proxy" configurable-http-proxy@4 > "$STATE/npm.log" 2>&1 < /dev/null; then
        say "npm could not install configurable-http-proxy; its log ($STATE/npm.log) ends:"
        tail -5 "$STATE/npm.log" >&2
        exit 1
    fi
}

start() {
    if [ "$(id -u)" != 0 ]; then
        say "the hub starts each user's server as that user, which needs root"
        exit 2
    fi
    : "${ZEROLAB_HUB_USERS:?set ZEROLAB_HUB_USERS to the Linux users who may log in}"
    : "${ZEROLAB_HUB_PASSWORD:?set ZEROLAB_HUB_PASSWORD, the password they log in with}"
    install_if_missing
    mkdir -p "$STATE/jupyter"
    chmod 755 "$STATE" "$STATE/jupyter"  # the users' servers read the nbgrader config here
    local port hub_port api_port
    port="$(free_port)" hub_port="$(free_port)" api_port="$(free_port)"
    cat > "$STATE/jupyter/nbgrader_config.py" <<EOF
c = get_config()
c.CourseDirectory.course_id = "${ZEROLAB_HUB_COURSE:-zerolab}"
c.Exchange.root = "${ZEROLAB_HUB_EXCHANGE:-/srv/nbgrader/exchange}"
EOF
    cat > "$STATE/jupyterhub_config.py" <<EOF
c = get_config()
c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = $port
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = $hub_port
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:$api_port"
c.ConfigurableHTTPProxy.command = ["$PROXY"]
c.ConfigurableHTTPProxy.pid_file = "$STATE/proxy.pid"
c.JupyterHub.db_url = "sqlite:///$STATE/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "$STATE/cookie_secret"
c.JupyterHub.pid_file = "$STATE/jupyterhub.pid"
c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = "$ZEROLAB_HUB_PASSWORD"
c.Authenticator.allowed_users = set("$ZEROLAB_HUB_USERS".split())
c.Spawner.cmd = ["$VENV/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = {"PATH": "$VENV/bin:/usr/local/bin:/usr/bin:/bin", "JUPYTER_CONFIG_PATH": "$STATE/jupyter"}
c.Spawner.start_timeout = 180  # a busy 2-core machine
c.Spawner.http_timeout = 180
EOF
    echo "http://127.0.0.1:$port" > "$STATE/url"
    say "starting JupyterHub on http://127.0.0.1:$port (log: $STATE/jupyterhub.log)"
    # all of the background job's output to the log: a caller reading this script's output through a pipe must
    # not wait for the hub to end
    (cd "$STATE" && exec setsid "$VENV/bin/python" -m jupyterhub -f "$STATE/jupyterhub_config.py") \
        > "$STATE/jupyterhub.log" 2>&1 < /dev/null &
    for _ in $(seq 1 180); do
        if "$VENV/bin/python" -c "import urllib.request, sys; urllib.request.urlopen('http://127.0.0.1:$port/hub/api', timeout=2)" 2>/dev/null; then
            say "ready"
            return 0
        fi
        sleep 1
    done
    say "JupyterHub did not answer in 3 minutes; its log:"
    tail -30 "$STATE/jupyterhub.log" >&2
    exit 1
}

stop() {
    local pid
    for file in jupyterhub.pid proxy.pid; do
        [ -f "$STATE/$file" ] || continue
        pid="$(cat "$STATE/$file")"
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$STATE/$file"
    done
    # each user's server was started by this hub's spawner with this venv's jupyterhub-singleuser
    pkill -f "$VENV/bin/jupyterhub-singleuser" 2>/dev/null || true
    say "stopped"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    url) cat "$STATE/url" ;;
    *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
