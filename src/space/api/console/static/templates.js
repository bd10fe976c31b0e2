import { api, guarded, rows, start } from "./common.js";

const me = await start();
if (me) {
  await guarded(async () => {
    const { templates } = await api("/console/api/templates");
    rows(document.querySelector("#templates tbody"), templates, (t) => [
      t.name,
      `${t.warm_ready} / ${t.warm_target}`,
      String(t.warm_hits),
      String(t.warm_misses),
    ]);
  });
}
