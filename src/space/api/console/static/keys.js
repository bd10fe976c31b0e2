import { api, el, guarded, rows, start, when } from "./common.js";

const me = await start();

async function refresh() {
  const { keys } = await api("/v1/keys");
  rows(document.querySelector("#keys tbody"), keys, (k) => [
    el("code", {}, k.id),
    el("code", {}, k.prefix),
    k.org,
    k.project ?? "",
    k.admin ? `${k.role} (operator)` : k.role,
    when(k.created_at),
    k.expires_at ? when(k.expires_at) : "never",
    when(k.revoked_at),
    k.revoked_at || k.admin
      ? ""
      : el("button", { type: "button", class: "danger", onclick: () => revoke(k) }, "Revoke"),
  ]);
}

function revoke(key) {
  if (!confirm(`Revoke key ${key.prefix}…? Everything using it stops at once.`)) return;
  guarded(async () => {
    await api("/v1/keys/" + encodeURIComponent(key.id), { method: "DELETE" });
    await refresh();
  });
}

document.getElementById("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(async () => {
    const project = document.getElementById("key-project").value.trim();
    const role = document.getElementById("key-role").value;
    const created = await api("/v1/keys", { method: "POST", json: project ? { project, role } : { role } });
    document.getElementById("new-key-value").textContent = created.key;
    document.getElementById("new-key").hidden = false;
    await refresh();
  });
});

if (me) await guarded(refresh);
