import { api, el, events, fromBase64, guarded, rows, start, v1Sandbox, when } from "./common.js";

const id = document.body.dataset.sandbox;
const me = await start();
const output = document.getElementById("output");
let following = null;

function detail(name, value) {
  return [el("dt", {}, name), el("dd", { "data-field": name }, value ?? "")];
}

async function refresh() {
  const s = await api(v1Sandbox(id));
  const metadata = Object.entries(s.metadata).map(([k, v]) => el("div", { class: "metadata" }, `${k}=${v}`));
  document.getElementById("details").replaceChildren(
    ...detail("state", s.state),
    ...detail("template", s.template),
    ...detail("size", me ? `${me.vcpus} vCPU / ${me.memory_mib} MiB` : ""),
    ...detail("owner", me ? me.org : ""),
    ...detail("created", when(s.created_at)),
    ...detail("last activity", when(s.last_activity_at)),
    ...detail("expires", s.expires_at ? when(s.expires_at) : "never"),
    ...detail("idle timeout", `${s.idle_timeout}s`),
    ...detail("reason", s.reason),
    el("dt", {}, "metadata"),
    el("dd", {}, ...metadata),
  );
  return s;
}

function commandText(argv) {
  if (argv.cmd !== undefined) return argv.cmd;
  if (argv.args !== undefined) return argv.args.join(" ");
  if (argv.pty !== undefined) return `terminal: ${argv.pty}`;
  return JSON.stringify(argv);
}

async function refreshCommands() {
  const { commands } = await api(`/console/api/sandboxes/${encodeURIComponent(id)}/commands`);
  rows(document.querySelector("#commands tbody"), commands, (c) => [
    el("code", {}, c.id),
    el("code", {}, commandText(c.argv)),
    c.state,
    c.exit_code ?? "",
    when(c.created_at),
    c.has_log ? el("button", { type: "button", onclick: () => follow(c.id) }, "Output") : "",
  ]);
}

// Stream a command's stdout/stderr into the output panel until its exit.
async function follow(commandId) {
  following?.abort();
  const controller = new AbortController();
  following = controller;
  output.replaceChildren();
  output.dataset.state = "streaming";
  document.getElementById("output-of").textContent = commandId;
  const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
  try {
    const path = `${v1Sandbox(id)}/commands/${encodeURIComponent(commandId)}/events`;
    for await (const event of events(path, { signal: controller.signal })) {
      const data = JSON.parse(event.data);
      if (event.event === "exit") {
        output.append(el("span", { class: "exit" }, `\n[exit ${data.exit_code}]\n`));
        output.dataset.state = "exited";
        break;
      }
      const text = decoders[event.event]?.decode(fromBase64(data.data), { stream: true });
      if (text) output.append(el("span", { class: event.event }, text));
    }
  } catch (error) {
    if (!controller.signal.aborted) throw error;
  } finally {
    if (following === controller) following = null;
  }
  await refreshCommands();
}

document.getElementById("run-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(async () => {
    const cmd = document.getElementById("cmd").value;
    const created = await api(`${v1Sandbox(id)}/commands`, { method: "POST", json: { cmd } });
    await refreshCommands();
    await follow(created.id);
  });
});

for (const button of document.querySelectorAll("[data-action]")) {
  button.addEventListener("click", () => {
    const action = button.dataset.action;
    const status = document.getElementById("action-status");
    guarded(async () => {
      status.textContent = `${action}…`;
      try {
        if (action === "delete") {
          if (!confirm(`Delete sandbox ${id}?`)) return;
          await api(v1Sandbox(id), { method: "DELETE" });
          location.assign("/console/sandboxes");
          return;
        }
        await api(`${v1Sandbox(id)}/${action}`, { method: "POST" });
        await refresh();
      } finally {
        status.textContent = "";
      }
    });
  });
}

if (me) {
  await Promise.all([guarded(refresh), guarded(refreshCommands)]);
  setInterval(() => guarded(refresh), 5000);
}
