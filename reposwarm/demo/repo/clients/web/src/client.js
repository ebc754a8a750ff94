// @ts-check
/** Taskboard web client: parse and format the tasks the API returns (no network here). */

/**
 * @typedef {object} Task
 * @property {number} id
 * @property {string} title
 * @property {boolean} done
 */

/**
 * Check one task object from the API.
 * @param {any} raw
 * @returns {Task}
 */
export function parseTask(raw) {
  if (!raw || typeof raw !== "object") throw new TypeError("task must be an object");
  if (!Number.isInteger(raw.id)) throw new TypeError("task.id must be an integer");
  if (typeof raw.title !== "string" || !raw.title.trim()) throw new TypeError("task.title must be a non-empty string");
  return { id: raw.id, title: raw.title, done: Boolean(raw.done) };
}

/**
 * Parse the JSON body of a task list.
 * @param {string} text
 * @returns {Task[]}
 */
export function parseTaskList(text) {
  const data = JSON.parse(text);
  if (!Array.isArray(data)) throw new TypeError("expected a JSON array of tasks");
  return data.map(parseTask);
}

/**
 * One line for a task, e.g. "[x] #3 Write docs".
 * @param {Task} task
 * @returns {string}
 */
export function formatTask(task) {
  return `[${task.done ? "x" : " "}] #${task.id} ${task.title}`;
}

/**
 * The JSON body for creating a task.
 * @param {string} title
 * @returns {string}
 */
export function toCreatePayload(title) {
  const trimmed = title.trim();
  if (!trimmed) throw new TypeError("title must not be empty");
  return JSON.stringify({ title: trimmed });
}
