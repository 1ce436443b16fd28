// The official OpenAI and Anthropic clients, unchanged, against the
// stickyd gateway (test/e2e/gateway_clients_test.go starts it in front of
// fake providers). Every request body a client sends is captured through
// the clients' own fetch option, so the test can compare it with what the
// provider received. Prints one JSON document: {sent, results}.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.GATEWAY_URL;
const key = process.env.GATEWAY_KEY;
const sent = [];
const capture = async (url, init) => {
  sent.push({ url: String(url), body: typeof init?.body === 'string' ? init.body : null });
  return fetch(url, init);
};
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: key, fetch: capture, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, fetch: capture, maxRetries: 0 });

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const results = {};
const image = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

// A tool-calling conversation, answered whole.
{
  const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
  const first = await openai.chat.completions.create({ model: 'gpt', messages, tools: [weatherTool], tool_choice: 'auto', parallel_tool_calls: false });
  const call = first.choices[0].message.tool_calls[0];
  messages.push(first.choices[0].message);
  messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temp_c: 21 }) });
  const second = await openai.chat.completions.create({ model: 'gpt', messages, tools: [weatherTool] });
  results.toolCall = { name: call.function.name, arguments: call.function.arguments, finish: first.choices[0].finish_reason, answer: second.choices[0].message.content, stickyd: second.stickyd };
}

// The same, streamed (the first turn without include_usage: the gateway
// adds it; the second with it).
{
  const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
  const stream = await openai.chat.completions.create({ model: 'gpt', messages, tools: [weatherTool], stream: true });
  const calls = [];
  let finish, usageChunks = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usageChunks++;
    for (const choice of chunk.choices) {
      for (const tc of choice.delta.tool_calls ?? []) {
        calls[tc.index] ??= { id: '', name: '', arguments: '' };
        if (tc.id) calls[tc.index].id = tc.id;
        if (tc.function?.name) calls[tc.index].name = tc.function.name;
        calls[tc.index].arguments += tc.function?.arguments ?? '';
      }
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  messages.push({ role: 'assistant', content: null, tool_calls: calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })) });
  messages.push({ role: 'tool', tool_call_id: calls[0].id, content: '{"temp_c":21}' });
  const second = await openai.chat.completions.create({ model: 'gpt', messages, tools: [weatherTool], stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null, stickyd = null;
  for await (const chunk of second) {
    for (const choice of chunk.choices) text += choice.delta.content ?? '';
    if (chunk.usage) usage = chunk.usage;
    if (chunk.stickyd) stickyd = chunk.stickyd;
  }
  results.toolCallStream = { calls, finish, usageChunks, answer: text, usage, stickyd };
}

// A vision request.
{
  const r = await openai.chat.completions.create({ model: 'gpt', messages: [{ role: 'user', content: [
    { type: 'text', text: 'What is in this image?' }, { type: 'image_url', image_url: { url: image, detail: 'low' } }] }] });
  results.vision = r.choices[0].message.content;
}

// JSON-schema output.
{
  const r = await openai.chat.completions.create({ model: 'gpt', messages: [{ role: 'user', content: 'The weather, as JSON' }],
    response_format: { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: { type: 'object',
      properties: { city: { type: 'string' }, temp_c: { type: 'number' } }, required: ['city', 'temp_c'], additionalProperties: false } } } });
  results.jsonSchema = JSON.parse(r.choices[0].message.content);
}

// What the gateway used to refuse or drop, all at once.
{
  const r = await openai.chat.completions.create({ model: 'gpt', n: 2, seed: 42, logprobs: true, top_logprobs: 2,
    max_completion_tokens: 300, reasoning_effort: 'low', presence_penalty: 0.5, frequency_penalty: 0.25,
    logit_bias: { '50256': -100 }, metadata: { run: 'e2e' }, service_tier: 'auto', user: 'maria', stop: ['END'],
    tools: [weatherTool], tool_choice: 'none', response_format: { type: 'json_object' },
    messages: [{ role: 'developer', content: 'Answer in JSON.' }, { role: 'user', content: [{ type: 'text', text: 'Describe' }, { type: 'image_url', image_url: { url: image } }] }] });
  results.everything = { choices: r.choices.length, logprobs: r.choices[0].logprobs?.content?.length ?? 0, fingerprint: r.system_fingerprint };
}

// Embeddings (the client asks for base64 and decodes it).
{
  const r = await openai.embeddings.create({ model: 'emb', input: ['sticky', 'sessions'] });
  results.embeddings = { count: r.data.length, first: Array.from(r.data[0].embedding), usage: r.usage };
}

// The models the gateway serves.
{
  const list = [];
  for await (const m of openai.models.list()) list.push(m.id);
  results.models = list;
}

// The Responses API, whole and streamed, with a function tool.
{
  const tool = { type: 'function', name: 'get_weather', description: 'The weather in a city', parameters: weatherTool.function.parameters, strict: false };
  const r = await openai.responses.create({ model: 'gpt2', input: 'What is the weather in Vilnius?', tools: [tool] });
  const call = r.output.find((o) => o.type === 'function_call');
  const r2 = await openai.responses.create({ model: 'gpt2', tools: [tool], input: [
    { role: 'user', content: 'What is the weather in Vilnius?' },
    { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
    { type: 'function_call_output', call_id: call.call_id, output: '{"temp_c":21}' }] });
  const events = [];
  const stream = await openai.responses.create({ model: 'gpt2', input: 'Say hello', stream: true });
  let streamed = '';
  for await (const ev of stream) {
    events.push(ev.type);
    if (ev.type === 'response.output_text.delta') streamed += ev.delta;
  }
  const helper = openai.responses.stream({ model: 'gpt2', input: 'What is the weather in Vilnius?', tools: [tool] });
  const final = await helper.finalResponse();
  results.responses = { call: { name: call.name, arguments: call.arguments }, answer: r2.output_text, streamed, events,
    streamedCall: final.output.find((o) => o.type === 'function_call')?.arguments };
}

// @anthropic-ai/sdk: a streamed tool-use conversation against /v1/messages,
// on an Anthropic deployment (its own events) and on an OpenAI one (events
// written by the gateway).
for (const model of ['claude', 'gpt2']) {
  const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: weatherTool.function.parameters }];
  const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
  const stream = anthropic.messages.stream({ model, max_tokens: 256, tools, messages });
  const jsonDeltas = [];
  stream.on('inputJson', (partial) => jsonDeltas.push(partial));
  const first = await stream.finalMessage();
  const use = first.content.find((b) => b.type === 'tool_use');
  messages.push({ role: 'assistant', content: first.content });
  messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c":21}' }] });
  const second = await anthropic.messages.stream({ model, max_tokens: 256, tools, messages }).finalMessage();
  const whole = await anthropic.messages.create({ model, max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] });
  results['anthropic_' + model] = { input: use.input, stop: first.stop_reason, jsonDeltas: jsonDeltas.length, usage: first.usage,
    answer: second.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), whole: whole.content[0].text };
}

process.stdout.write(JSON.stringify({ sent, results }));
