import { api, el, guarded, rows, start, v1Sandbox, when } from "./common.js";

const id = document.body.dataset.sandbox;
const me = await start();
const pathInput = document.getElementById("path");
const here = () => new URLSearchParams(location.search).get("path") || "/";
const join = (dir, name) => (dir.endsWith("/") ? dir : dir + "/") + name;
const filesUrl = (path) => `${v1Sandbox(id)}/files?path=${encodeURIComponent(path)}`;

function openDir(path) {
  const url = new URL(location.href);
  url.searchParams.set("path", path);
  location.assign(url.pathname + url.search);
}

async function download(entry) {
  const response = await api(filesUrl(entry.path), { raw: true });
  const url = URL.createObjectURL(await response.blob());
  try {
    el("a", { href: url, download: entry.name }).click();
  } finally {
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }
}

async function refresh() {
  const dir = here();
  pathInput.value = dir;
  const listing = await api(`/console/api/sandboxes/${encodeURIComponent(id)}/dir?path=${encodeURIComponent(dir)}`);
  const parent = dir.replace(/\/[^/]+\/?$/, "") || "/";
  const up = dir === "/" ? [] : [{ name: "..", path: parent, type: "dir", size: 0, mtime: null, up: true }];
  rows(document.querySelector("#entries tbody"), [...up, ...listing.entries], (entry) => [
    entry.type === "dir"
      ? el("a", { href: "#", class: "dir", onclick: (e) => (e.preventDefault(), openDir(entry.path)) }, entry.name)
      : el("span", { class: "file" }, entry.name),
    entry.up ? "" : entry.type,
    entry.type === "dir" ? "" : String(entry.size),
    entry.mtime ? when(new Date(entry.mtime * 1000).toISOString()) : "",
    entry.type === "file"
      ? el("button", { type: "button", "data-download": entry.name, onclick: () => guarded(() => download(entry)) }, "Download")
      : "",
  ]);
}

document.getElementById("path-form").addEventListener("submit", (event) => {
  event.preventDefault();
  openDir(pathInput.value.trim() || "/");
});

document.getElementById("upload-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const file = document.getElementById("upload").files[0];
  const status = document.getElementById("upload-status");
  if (!file) return;
  guarded(async () => {
    status.textContent = `uploading ${file.name}…`;
    await api(filesUrl(join(here(), file.name)), {
      method: "PUT",
      body: file,
      headers: { "Content-Type": "application/octet-stream" },
    });
    status.textContent = `uploaded ${file.name}`;
    await refresh();
  });
});

if (me) await guarded(refresh);
