// The official OpenAI and Anthropic clients, unchanged, against the
// stickyd gateway in front of one fake of each provider
// (test/e2e/gateway_providers_test.go). For each model of MODELS (one a
// provider), the same scenarios: a tool-calling conversation whole and
// streamed, a vision request, JSON-schema output, embeddings (EMBEDDINGS:
// the embedding models, model=provider pairs) and @anthropic-ai/sdk's
// streamed tool use against /v1/messages. A scenario the gateway refuses
// reports the refusal (status, code, param). Prints one JSON document:
// {results: {model: {scenario: {ok} | {refused}}}}.
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const base = process.env.GATEWAY_URL;
const key = process.env.GATEWAY_KEY;
const openai = new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0 });

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const image = 'data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';

// run reports a scenario's result, or the gateway's refusal of it.
async function run(fn) {
  try {
    return { ok: await fn() };
  } catch (e) {
    if (e instanceof OpenAI.APIError || e instanceof Anthropic.APIError) {
      const err = e.error?.error ?? e.error ?? {};
      return { refused: { status: e.status, code: err.code ?? err.type ?? null, param: err.param ?? e.param ?? null, message: err.message ?? e.message } };
    }
    return { failed: String(e?.stack ?? e) };
  }
}

const scenarios = {
  // A tool-calling conversation, answered whole.
  async toolCall(model) {
    const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
    const first = await openai.chat.completions.create({ model, messages, tools: [weatherTool], tool_choice: 'auto' });
    const call = first.choices[0].message.tool_calls[0];
    messages.push(first.choices[0].message);
    messages.push({ role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temp_c: 21 }) });
    const second = await openai.chat.completions.create({ model, messages, tools: [weatherTool] });
    return { name: call.function.name, arguments: JSON.parse(call.function.arguments), finish: first.choices[0].finish_reason,
      answer: second.choices[0].message.content, provider: second.stickyd?.provider, usage: second.usage };
  },

  // The same, streamed, with the usage asked for.
  async toolCallStream(model) {
    const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
    const stream = await openai.chat.completions.create({ model, messages, tools: [weatherTool], stream: true });
    const calls = [];
    let finish;
    for await (const chunk of stream) {
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
    const second = await openai.chat.completions.create({ model, messages, tools: [weatherTool], stream: true, stream_options: { include_usage: true } });
    let text = '', usage = null, stickyd = null;
    for await (const chunk of second) {
      for (const choice of chunk.choices) text += choice.delta.content ?? '';
      if (chunk.usage && chunk.choices.length === 0) usage = chunk.usage;
      if (chunk.stickyd) stickyd = chunk.stickyd;
    }
    return { name: calls[0]?.name, arguments: JSON.parse(calls[0]?.arguments || 'null'), finish, answer: text, usage, cost: stickyd?.cost_micros ?? null };
  },

  // A vision request (an inline image).
  async vision(model) {
    const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: [
      { type: 'text', text: 'What is in this image?' }, { type: 'image_url', image_url: { url: image } }] }] });
    return { answer: r.choices[0].message.content };
  },

  // JSON-schema output.
  async jsonSchema(model) {
    const r = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'The weather, as JSON' }],
      response_format: { type: 'json_schema', json_schema: { name: 'weather', strict: true, schema: { type: 'object',
        properties: { city: { type: 'string' }, temp_c: { type: 'number' } }, required: ['city', 'temp_c'], additionalProperties: false } } } });
    return { answer: JSON.parse(r.choices[0].message.content) };
  },

  // @anthropic-ai/sdk: a streamed tool-use conversation against /v1/messages.
  async anthropicStream(model) {
    const tools = [{ name: 'get_weather', description: 'The weather in a city', input_schema: weatherTool.function.parameters }];
    const messages = [{ role: 'user', content: 'What is the weather in Vilnius?' }];
    const stream = anthropic.messages.stream({ model, max_tokens: 256, tools, messages });
    let jsonDeltas = 0;
    stream.on('inputJson', () => jsonDeltas++);
    const first = await stream.finalMessage();
    const use = first.content.find((b) => b.type === 'tool_use');
    messages.push({ role: 'assistant', content: first.content });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '{"temp_c":21}' }] });
    const second = await anthropic.messages.stream({ model, max_tokens: 256, tools, messages }).finalMessage();
    return { input: use.input, stop: first.stop_reason, jsonDeltas, answer: second.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
      usage: second.usage };
  },
};

const results = {};
for (const model of process.env.MODELS.split(',')) {
  results[model] = {};
  for (const [name, fn] of Object.entries(scenarios)) {
    results[model][name] = await run(() => fn(model));
  }
}
// Embeddings (the client asks for base64 and decodes it).
for (const pair of process.env.EMBEDDINGS.split(',')) {
  const [model, of] = pair.split('=');
  results[of]['embeddings:' + model] = await run(async () => {
    const r = await openai.embeddings.create({ model, input: ['sticky', 'sessions'] });
    return { count: r.data.length, first: Array.from(r.data[0].embedding), usage: r.usage };
  });
}
process.stdout.write(JSON.stringify({ results }));
