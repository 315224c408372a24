"""Anthropic-Messages endpoint for Claude Code in the author stage.

Claude Code speaks the Anthropic Messages API; the policy model is an
OpenAI-compatible endpoint. As the reference does (NeMo Gym
responses_api_agents/nemorl_env/author_worker.py, main), this serves NeMo Gym's
VLLMModel adapter in-process on 127.0.0.1: every Gym model server answers
POST /v1/messages, converts the request to a Responses call, which VLLMModel
sends to {base_url}/chat/completions with the policy model's name and key,
and replays the answer as Messages (an SSE stream when stream=true).
Point Claude Code at it with ANTHROPIC_BASE_URL=http://127.0.0.1:<port>.

Run it with the Gym venv of the author image:

    /opt/nemorl/gym-venv/bin/python author_proxy.py --key-fd 3 [--status-fd 4] \
        --settings $NEMORL_BUNDLE/author.json [--port PORT] [--gym-root DIR] 3<secrets.env

author.json is the author bundle: {"policy_model": {"base_url": str or
[str, ...], "model": str, "uses_reasoning_parser": bool}, ...}; other keys
are ignored and an "api_key" in it is refused. The key is read from the
inherited descriptor --key-fd (a "NEMORL_POLICY_API_KEY=<key>" line, as in
secrets.env, or the key alone), which is closed once read: never from the
environment or the command line, which same-user processes can read in
/proc. Before anything else the process makes itself non-dumpable
(prctl PR_SET_DUMPABLE 0), so other processes of the user cannot read its
/proc/PID/environ, mem or fd/.

--status-fd N (optional): a descriptor the batch script opened on a file
outside the container. The proxy writes "proxy <pid> started" on it at
startup, then one line per call to the policy's endpoint as it ends: "ok"
(an HTTP status below 400), "error <http-status>" or "error connect" (no
HTTP answer: refused, reset, timed out). The script reads it to tell an
endpoint outage (infrastructure) from a policy failure.

Output: exactly one line on stdout, "READY <port>", once the server accepts
connections (with --port 0, the default, the port is chosen by the kernel).
Everything else (Gym's and uvicorn's logs) goes to stderr, and both streams
replace the key with [redacted]; this program never prints the key.
SIGTERM or SIGINT stop the server. Exit 2: bad arguments, bundle, key or
Gym tree (nothing is served); exit 1: the server failed.
"""

import argparse
import asyncio
import ctypes
import io
import json
import os
import socket
import sys

KEY_ENV = "NEMORL_POLICY_API_KEY"
HOST = "127.0.0.1"  # never anything but loopback: the proxy holds the key
DEFAULT_GYM_ROOT = "/opt/nemorl/src/NeMo-RL/3rdparty/Gym-workspace/Gym"


class UsageError(Exception):
    """Bad arguments, bundle, key or Gym tree (exit 2)."""


class Redacting(io.TextIOBase):
    """A text stream that writes to another one with the secret masked."""

    def __init__(self, stream, secret):
        self._stream = stream
        self._secret = secret

    def write(self, s):
        if self._secret:
            s = s.replace(self._secret, "[redacted]")
        self._stream.write(s)
        return len(s)

    def flush(self):
        self._stream.flush()

    def isatty(self):
        return False

    def fileno(self):
        return self._stream.fileno()

    @property
    def encoding(self):
        return getattr(self._stream, "encoding", "utf-8")


def load_policy_model(path):
    """The upstream endpoint settings from the author bundle JSON."""
    try:
        with open(path, encoding="utf-8") as f:
            bundle = json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"author bundle {path}: {e}") from None
    pm = bundle.get("policy_model") if isinstance(bundle, dict) else None
    if not isinstance(pm, dict):
        raise UsageError(f"author bundle {path}: no policy_model object")
    if "api_key" in pm:
        raise UsageError(f"author bundle {path}: policy_model.api_key must not be in the bundle (the key comes from --key-fd)")
    base_url = pm.get("base_url")
    urls = [base_url] if isinstance(base_url, str) else base_url
    if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise UsageError(f"author bundle {path}: policy_model.base_url must be an http(s) URL or a non-empty list of them")
    model = pm.get("model")
    if not isinstance(model, str) or not model:
        raise UsageError(f"author bundle {path}: policy_model.model must be a non-empty string")
    reasoning = pm.get("uses_reasoning_parser")
    if not isinstance(reasoning, bool):
        raise UsageError(f"author bundle {path}: policy_model.uses_reasoning_parser must be true or false")
    return {"base_url": base_url, "model": model, "uses_reasoning_parser": reasoning}


PR_SET_DUMPABLE = 4


def make_undumpable():
    """prctl(PR_SET_DUMPABLE, 0): /proc/PID/{environ,mem,fd} of this process
    become unreadable to other processes of the same user."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise UsageError(f"prctl(PR_SET_DUMPABLE, 0): {os.strerror(ctypes.get_errno())}")


def take_key(fd):
    """Read the API key from descriptor fd, then close it."""
    try:
        with os.fdopen(fd, "rb", closefd=True) as f:
            data = f.read(1 << 16).decode("utf-8", "replace")
    except OSError as e:
        raise UsageError(f"--key-fd {fd}: {e}") from None
    key = ""
    lines = data.splitlines()
    for line in lines:
        if line.startswith(KEY_ENV + "="):
            key = line[len(KEY_ENV) + 1 :]
    if not key and len(lines) == 1 and "=" not in lines[0]:
        key = lines[0]
    key = key.strip()
    if not key:
        raise UsageError(f"--key-fd {fd} held no key")
    return key


class Status:
    """The --status-fd protocol: one line per upstream call."""

    def __init__(self, fd):
        self._fd = fd

    def line(self, s):
        if self._fd is None:
            return
        try:
            os.write(self._fd, (s + "\n").encode())
        except OSError:
            pass

    def attach(self, http, own):
        """Record every request of the aiohttp session http but those to
        this server itself (own: (host, port))."""
        if self._fd is None:
            return
        import aiohttp

        def upstream(url):
            return (url.host, url.port) != own

        async def on_end(session, ctx, params):
            if upstream(params.url):
                st = params.response.status
                self.line("ok" if st < 400 else f"error {st}")

        async def on_exception(session, ctx, params):
            if upstream(params.url):
                self.line("error connect")

        tc = aiohttp.TraceConfig()
        tc.on_request_end.append(on_end)
        tc.on_request_exception.append(on_exception)
        tc.freeze()
        configs = getattr(http, "_trace_configs", None)
        if not isinstance(configs, list):
            print("author_proxy: warning: cannot trace the Gym HTTP client; upstream calls are not reported", file=sys.stderr)
            return
        configs.append(tc)


def listen(port):
    """A listening loopback socket; port 0 lets the kernel choose."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {HOST}:{port}: {e}") from None
    sock.listen(128)
    return sock


async def serve(settings, key, sock, ready_out, status):
    """Serve Gym's VLLMModel adapter on sock until a signal stops it."""
    import uvicorn
    from omegaconf import OmegaConf

    from nemo_gym.server_utils import GlobalAIOHTTPAsyncClientConfig, ServerClient, set_global_aiohttp_client
    from responses_api_models.vllm_model.app import VLLMModel, VLLMModelConfig

    port = sock.getsockname()[1]
    # The same construction as the reference author worker: a global config
    # naming this server, token-id capture off, no token ids returned.
    client = ServerClient.model_construct(
        global_config_dict=OmegaConf.create(
            {
                "policy_model": {"responses_api_models": {"vllm_model": {"host": HOST, "port": port}}},
                "token_id_capture": {"enabled": False},
            }
        )
    )
    adapter = VLLMModel(
        config=VLLMModelConfig(
            name="policy_model",
            host=HOST,
            port=port,
            entrypoint="app.py",
            return_token_id_information=False,
            base_url=settings["base_url"],
            api_key=key,
            model=settings["model"],
            uses_reasoning_parser=settings["uses_reasoning_parser"],
        ),
        server_client=client,
    )
    http = set_global_aiohttp_client(GlobalAIOHTTPAsyncClientConfig())
    status.attach(http, (HOST, port))
    server = uvicorn.Server(uvicorn.Config(adapter.setup_webserver(), host=HOST, port=port))
    serving = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if serving.done():
                await serving
                raise RuntimeError("the model adapter stopped before it was ready")
            await asyncio.sleep(0.05)
        ready_out.write(f"READY {port}\n")
        ready_out.flush()
        await serving
    finally:
        server.should_exit = True
        if not serving.done():
            await serving
        await http.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description="Anthropic-Messages proxy to the policy model (NeMo Gym VLLMModel).")
    parser.add_argument("--settings", required=True, help="the author bundle JSON (author.json)")
    parser.add_argument("--key-fd", type=int, required=True, help="inherited descriptor holding the API key (closed once read)")
    parser.add_argument("--status-fd", type=int, default=None, help="inherited descriptor for one line per upstream call")
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (default 0: any free port)")
    parser.add_argument(
        "--gym-root",
        default=os.environ.get("NEMORL_GYM_ROOT", DEFAULT_GYM_ROOT),
        help="the pristine NeMo Gym tree to import from (default $NEMORL_GYM_ROOT, else %(default)s)",
    )
    args = parser.parse_args(argv)

    ready_out = sys.stdout
    status = Status(args.status_fd)
    status.line(f"proxy {os.getpid()} started")
    try:
        make_undumpable()
        key = take_key(args.key_fd)
        # From here on nothing can reach either stream with the key in it,
        # and stdout is kept for the READY line alone.
        sys.stderr = Redacting(sys.__stderr__, key)
        sys.stdout = sys.stderr
        if not 0 <= args.port <= 65535:
            raise UsageError(f"--port {args.port} is not 0..65535")
        settings = load_policy_model(args.settings)
        if not os.path.isfile(os.path.join(args.gym_root, "nemo_gym", "__init__.py")):
            raise UsageError(f"--gym-root {args.gym_root} is not a NeMo Gym tree")
        sys.path.insert(0, os.path.abspath(args.gym_root))
        sock = listen(args.port)
    except UsageError as e:
        print(f"author_proxy: {e}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(settings, key, sock, ready_out, status))
    except KeyboardInterrupt:
        pass
    except Exception as e:  # noqa: BLE001 - reported, then exit 1
        print(f"author_proxy: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
