// Uploading files and folders as the SDK does: each file (or a folder zipped in the browser)
// goes to temp_upload with its progress shown, then add_resource adds it under the target.
import { get, post, tempUpload } from "../api.js";
import { announce } from "../shell.js";
import { badge, clear, errorBox, field, formatBytes, h, routeHref } from "../dom.js";

const zipLib = () => import("./vendor/zip.js"); // relative to the bundle

function progressRow(label) {
  const bar = h("progress", { max: "100", value: "0", "aria-label": `Upload of ${label}` });
  const state = h("span", { class: "muted" }, "waiting");
  const row = h("li", { class: "upload-row" }, h("span", { class: "name" }, label), bar, state);
  return {
    row,
    progress(loaded, total) {
      bar.value = total ? Math.round((loaded / total) * 100) : 0;
      state.textContent = `${formatBytes(loaded)} of ${formatBytes(total)}`;
    },
    status(...nodes) {
      clear(state, ...nodes);
    },
  };
}

/** Zips the files of one picked folder; entry names keep the folder as their first segment. */
async function zipFolder(files) {
  const { zipSync } = await zipLib();
  const entries = {};
  for (const file of files) {
    entries[file.webkitRelativePath || file.name] = new Uint8Array(await file.arrayBuffer());
  }
  return new Blob([zipSync(entries, { level: 6 })], { type: "application/zip" });
}

async function waitForTask(taskId, row) {
  for (let i = 0; i < 600; i += 1) {
    const task = await get(`/api/v1/tasks/${encodeURIComponent(taskId)}`);
    if (task.status === "completed") return task;
    if (task.status === "failed" || task.status === "cancelled") {
      throw Object.assign(new Error(task.error || task.status), { code: "TASK_FAILED" });
    }
    row.status(badge(task.status, "warn"), ` ${task.stage || ""}`);
    await new Promise((resolve) => setTimeout(resolve, Math.min(250 + i * 50, 2000)));
  }
  return null;
}

async function addOne(blob, filename, target, list) {
  const item = progressRow(filename);
  list.append(item.row);
  try {
    const tempId = await tempUpload(blob, filename, (loaded, total) =>
      item.progress(loaded, total));
    item.status("adding…");
    const body = { temp_file_id: tempId, source_name: filename, wait: false };
    if (target) body.parent = target;
    const result = await post("/api/v1/resources", body);
    const link = h("a", { href: routeHref("browse", { uri: result.root_uri }) },
      result.root_uri);
    item.status(badge("processing", "warn"), " ", link);
    if (result.task_id) await waitForTask(result.task_id, item);
    item.status(badge("added", "good"), " ", link);
    return result.root_uri;
  } catch (error) {
    item.status(errorBox(error));
    return null;
  }
}

export function uploadPanel() {
  const files = h("input", { type: "file", multiple: true, name: "files" });
  const folder = h("input", { type: "file", webkitdirectory: true, name: "folder" });
  const parent = h("input", { name: "parent", placeholder: "viking://resources (default)" });
  const list = h("ul", { class: "uploads", "aria-live": "polite",
    "aria-label": "Uploads" });
  const form = h("form", { class: "card", "aria-labelledby": "upload-title" },
    h("h2", { id: "upload-title" }, "Upload"),
    field("Files", files, "Each file becomes a resource directory named after it."),
    field("Folder", folder, "The folder is zipped in this browser and keeps its tree."),
    field("Parent directory", parent, "Optional: a directory under viking://resources."),
    h("button", { type: "submit", class: "primary" }, "Upload"), list);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const target = parent.value.trim();
    const jobs = [];
    for (const file of files.files) jobs.push(addOne(file, file.name, target, list));
    const picked = [...folder.files];
    if (picked.length) {
      const name = (picked[0].webkitRelativePath || picked[0].name).split("/")[0];
      const zipped = await zipFolder(picked);
      jobs.push(addOne(zipped, `${name}.zip`, target, list));
    }
    if (!jobs.length) {
      announce("Choose files or a folder first.");
      return;
    }
    const added = (await Promise.all(jobs)).filter(Boolean);
    announce(`${added.length} of ${jobs.length} uploads added.`);
    form.reset();
  });
  return form;
}
