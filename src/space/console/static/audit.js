import { start } from "./common.js";

await start();
