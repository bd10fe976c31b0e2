import { ApiError, api, guarded, remember } from "./common.js";

function nextPage() {
  const next = new URLSearchParams(location.search).get("next") ?? "";
  return /^\/console\/[A-Za-z0-9/_?=&%.-]*$/.test(next) && !next.startsWith("/console/login") ? next : "/console/sandboxes";
}

document.getElementById("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const key = document.getElementById("key").value.trim();
  guarded(async () => {
    try {
      await api("/console/api/whoami", { key });
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) throw new Error("That API key is not valid.");
      throw error;
    }
    remember(key);
    location.assign(nextPage());
  });
});
