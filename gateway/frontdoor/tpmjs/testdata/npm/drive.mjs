// Runs the published TPMJS registry client, unmodified, against the URL in
// TPMJS_URL and prints what the tool returned to the model as one JSON line.
//
// The packages read TPMJS_EXECUTOR_URL and TPMJS_API_URL once, when they
// are imported, so both are set before a dynamic import. When IDEM is set,
// fetch is wrapped to add an Idempotency-Key header to every request: the
// wrapper a deployment would use, with the package's own code untouched.
//
// Inputs (environment): TPMJS_URL; MODE ("execute" or "search"); TOOL_ID,
// PARAMS and ENV (JSON) for execute; QUERY for search; IDEM (optional).
if (process.env.IDEM) {
  const orig = globalThis.fetch;
  globalThis.fetch = (url, init = {}) =>
    orig(url, { ...init, headers: { ...(init.headers || {}), 'Idempotency-Key': process.env.IDEM } });
}
process.env.TPMJS_EXECUTOR_URL = process.env.TPMJS_API_URL = process.env.TPMJS_URL;
const opts = { toolCallId: 'c1', messages: [] };
let result;
if (process.env.MODE === 'search') {
  const { registrySearchTool } = await import('@tpmjs/registry-search');
  result = await registrySearchTool.execute({ query: process.env.QUERY }, opts);
} else {
  const { registryExecuteTool } = await import('@tpmjs/registry-execute');
  result = await registryExecuteTool.execute({
    toolId: process.env.TOOL_ID,
    params: JSON.parse(process.env.PARAMS || '{}'),
    env: JSON.parse(process.env.ENV || 'null') ?? undefined,
  }, opts);
}
console.log(JSON.stringify(result));
