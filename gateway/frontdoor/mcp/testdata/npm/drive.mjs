// Runs the official MCP TypeScript SDK client, unmodified, against the MCP
// front door at TOOLGATE_URL (the endpoint, ending in /mcp) over Streamable
// HTTP, with TOOLGATE_KEY as its bearer key, and prints one JSON object.
//
// The script comes on stdin as JSON: {"steps": [step, ...]} where a step is
//   {"op": "list"}                                     every page of tools/list
//   {"op": "call", "name": "...", "arguments": {...}, "_meta": {...}}
// The output is
//   {"protocolVersion": "...", "steps": [{"result": ...} | {"error": {...}}, ...]}
// or {"connectError": {...}} when the client could not connect at all.
// A step's error is what the client threw: its code (JSON-RPC or HTTP),
// message and data, so the test sees what an application would.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const script = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{"steps":[]}');

const errorOf = (e) => ({ code: e?.code ?? null, message: String(e?.message ?? e), data: e?.data ?? null });

const headers = {};
if (process.env.TOOLGATE_KEY) headers.Authorization = `Bearer ${process.env.TOOLGATE_KEY}`;
const transport = new StreamableHTTPClientTransport(new URL(process.env.TOOLGATE_URL), { requestInit: { headers } });
const client = new Client({ name: 'toolgate-ts-test', version: '1.0.0' });

try {
  await client.connect(transport);
} catch (e) {
  console.log(JSON.stringify({ connectError: errorOf(e) }));
  process.exit(0);
}

const steps = [];
for (const step of script.steps) {
  try {
    if (step.op === 'list') {
      const tools = [];
      let cursor;
      do {
        const page = await client.listTools(cursor ? { cursor } : {});
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor);
      steps.push({ result: { tools } });
    } else if (step.op === 'call') {
      const params = { name: step.name, arguments: step.arguments ?? {} };
      if (step._meta) params._meta = step._meta;
      steps.push({ result: await client.callTool(params) });
    } else {
      steps.push({ error: { code: null, message: `unknown op ${step.op}`, data: null } });
    }
  } catch (e) {
    steps.push({ error: errorOf(e) });
  }
}
const out = { protocolVersion: transport.protocolVersion ?? null, steps };
await client.close();
console.log(JSON.stringify(out));
