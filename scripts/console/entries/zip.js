// Zipping a folder in the browser before upload, as the SDK zips a directory.
export { zipSync } from "fflate";
