// Runs an agent framework's MCP client, unmodified, against the MCP front
// door at TOOLGATE_URL (the endpoint, ending in /mcp) over Streamable HTTP,
// with TOOLGATE_KEY as its bearer key, the way an agent's tool call would:
// the framework lists the tools, turns them into its own tool objects, and
// the test calls one of them directly (no model is involved). Neither
// client declares elicitation or sends toolgate's idempotency key in _meta
// (the Vercel client negotiates 2026-07-28, whose _meta carries only the
// protocol's own keys; LangChain's negotiates 2025-11-25 and sends none).
//
// CLIENT picks the framework:
//   vercel     the Vercel AI SDK's experimental_createMCPClient (@ai-sdk/mcp),
//              its HTTP transport, tool.execute(args)
//   langchain  LangChain's MultiServerMCPClient (@langchain/mcp-adapters),
//              its HTTP transport, tool.invoke(args)
//
// The calls come on stdin as JSON: {"calls": [{"name": "...", "arguments": {...}}, ...]}.
// The output is one JSON object
//   {"protocolVersion": "..." | null, "calls": [{"isError": bool, "text": "...", "meta": {...} | null}, ...]}:
// what the framework handed back, or, when it threw (LangChain throws a
// ToolException for a tool error), isError true and the message it threw.
import { experimental_createMCPClient } from '@ai-sdk/mcp';
import { MultiServerMCPClient } from '@langchain/mcp-adapters';

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const script = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{"calls":[]}');
const url = process.env.TOOLGATE_URL;
const headers = process.env.TOOLGATE_KEY ? { Authorization: `Bearer ${process.env.TOOLGATE_KEY}` } : {};

const textOf = (content) => (Array.isArray(content) ? content : [])
  .map((c) => (typeof c === 'string' ? c : c?.text ?? '')).join('\n');

// vercel returns the framework's tools keyed by name and a close function.
async function vercel() {
  const client = await experimental_createMCPClient({ transport: { type: 'http', url, headers } });
  const tools = await client.tools();
  const call = async (name, args) => {
    const r = await tools[name].execute(args, { toolCallId: 'toolgate-test', messages: [] });
    return { isError: r?.isError === true, text: textOf(r?.content), meta: r?._meta ?? null };
  };
  return { call, close: () => client.close(), protocolVersion: client.initializeResult?.protocolVersion ?? null };
}

async function langchain() {
  const client = new MultiServerMCPClient({
    mcpServers: { toolgate: { transport: 'http', url, headers, automaticSSEFallback: false } },
    throwOnLoadError: true,
  });
  const tools = await client.getTools();
  const call = async (name, args) => {
    const tool = tools.find((t) => t.name === name);
    if (!tool) throw new Error(`no tool ${name} among ${tools.map((t) => t.name).join(', ')}`);
    const out = await tool.invoke(args);
    return { isError: false, text: typeof out === 'string' ? out : textOf(Array.isArray(out) ? out : [out]), meta: null };
  };
  // The adapters keep the SDK's client, which knows what it negotiated.
  const sdk = await client.getClient('toolgate');
  return { call, close: () => client.close(), protocolVersion: sdk?.transport?.protocolVersion ?? null };
}

const clients = { vercel, langchain };
const open = clients[process.env.CLIENT];
if (!open) {
  console.error(`CLIENT must be one of ${Object.keys(clients).join(', ')}`);
  process.exit(2);
}
const { call, close, protocolVersion } = await open();
const calls = [];
for (const c of script.calls) {
  try {
    calls.push(await call(c.name, c.arguments ?? {}));
  } catch (e) {
    calls.push({ isError: true, text: String(e?.message ?? e), meta: null });
  }
}
await close();
console.log(JSON.stringify({ protocolVersion, calls }));
