import { api, el, guarded, rows, start } from "./common.js";

const me = await start();
const select = document.getElementById("audit-sandbox");

async function show(sandboxId) {
  const { records } = await api(`/v1/sandboxes/${encodeURIComponent(sandboxId)}/egress?limit=200`);
  document.getElementById("audit-empty").hidden = records.length > 0;
  rows(document.querySelector("#audit tbody"), records, (r) => [
    new Date(r.at * 1000).toLocaleString(),
    r.kind,
    el("span", { class: "decision decision-" + r.decision }, r.decision),
    el("span", { class: "host" }, r.host ?? r.sni ?? r.address ?? ""),
    r.method ?? "",
    el("span", { class: "path" }, r.path ?? ""),
    r.rule ?? "",
    r.reason,
    String(r.policy_version),
  ]);
}

async function load() {
  const { sandboxes } = await api("/v1/sandboxes");
  select.replaceChildren(...sandboxes.map((s) => el("option", { value: s.id }, s.id)));
  const wanted = new URLSearchParams(location.search).get("sandbox");
  if (wanted && sandboxes.some((s) => s.id === wanted)) select.value = wanted;
  if (select.value) await show(select.value);
}

document.getElementById("audit-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const url = new URL(location.href);
  url.searchParams.set("sandbox", select.value);
  history.replaceState(null, "", url);
  guarded(() => show(select.value));
});

if (me) await guarded(load);
