import { age, api, el, guarded, rows, sandboxPath, start } from "./common.js";

const me = await start();
const body = document.querySelector("#sandboxes tbody");

function metadataText(metadata) {
  return Object.entries(metadata).map(([key, value]) => `${key}=${value}`).join(", ");
}

async function refresh() {
  const { sandboxes } = await api("/v1/sandboxes");
  document.getElementById("empty").hidden = sandboxes.length > 0;
  rows(body, sandboxes, (sandbox) => [
    el("a", { href: sandboxPath(sandbox.id), class: "sandbox-link" }, sandbox.id),
    el("span", { class: "state state-" + sandbox.state }, sandbox.state),
    sandbox.template,
    age(sandbox.created_at),
    me ? me.org : "",
    me ? `${me.vcpus} vCPU / ${me.memory_mib} MiB` : "",
    el("span", { class: "metadata" }, metadataText(sandbox.metadata)),
  ]);
}

async function loadTemplates() {
  const select = document.getElementById("template");
  const { templates } = await api("/console/api/templates");
  select.replaceChildren(...templates.map((t) => el("option", { value: t.name }, t.name)));
}

function parseMetadata(text) {
  const metadata = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const eq = line.indexOf("=");
    if (eq < 1) throw new Error(`metadata line ${JSON.stringify(line)} is not key=value`);
    metadata[line.slice(0, eq)] = line.slice(eq + 1);
  }
  return metadata;
}

document.getElementById("create-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const status = document.getElementById("create-status");
  const button = document.getElementById("create");
  guarded(async () => {
    const metadata = parseMetadata(document.getElementById("metadata").value);
    button.disabled = true;
    status.textContent = "creating…";
    try {
      const created = await api("/v1/sandboxes", {
        method: "POST",
        json: { template: document.getElementById("template").value || "base", metadata },
      });
      location.assign(sandboxPath(created.id));
    } finally {
      button.disabled = false;
      status.textContent = "";
    }
  });
});

if (me) {
  await Promise.all([guarded(loadTemplates), guarded(refresh)]);
  setInterval(() => guarded(refresh), 5000);
}
