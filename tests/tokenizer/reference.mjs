// Reference token ids from Hugging Face's `tokenizers` (the Rust library through its napi
// binding), for the parity tests and benchmarks of kvgate's tokenizer (issue 16).
//
//   node reference.mjs corpus [N]              the seeded test corpus, one JSON line per text
//   node reference.mjs ids DIR < lines.jsonl   {"ids": [...]} per {"text", "add_special_tokens"}
//   node reference.mjs bench DIR FILE [REPS]   encodeBatch throughput on FILE's lines
//
// NODE_PATH (or KVGATE_NPM_DIR/node_modules) must reach the `tokenizers` package. With
// add_special_tokens, transformers' rule for the Llama and Gemma tokenizer classes applies (the
// post-processor rebuilt from add_bos_token / add_eos_token in tokenizer_config.json), as
// kvgate applies it; other classes keep tokenizer.json's post-processor.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';

const require = createRequire(import.meta.url);
function loadTokenizers() {
  const dirs = [process.env.KVGATE_NPM_DIR && path.join(process.env.KVGATE_NPM_DIR, 'node_modules'),
                '/var/cache/kvgate/npm/node_modules'].filter(Boolean);
  for (const d of dirs) {
    try { return require(path.join(d, 'tokenizers')); } catch (e) { /* next */ }
  }
  return require('tokenizers');
}

function tokenContent(v) {
  if (v == null) return null;
  return typeof v === 'string' ? v : v.content ?? null;
}

// tokenizer.json with transformers' BOS/EOS rule applied.
function loadModel(dir) {
  const { Tokenizer } = loadTokenizers();
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const cfgPath = path.join(dir, 'tokenizer_config.json');
  const cfg = fs.existsSync(cfgPath) ? JSON.parse(fs.readFileSync(cfgPath, 'utf8')) : {};
  const cls = (cfg.tokenizer_class || '').replace(/Fast$/, '');
  if (['LlamaTokenizer', 'GemmaTokenizer', 'CodeLlamaTokenizer'].includes(cls)) {
    const idOf = (content) => {
      const added = json.added_tokens.find((t) => t.content === content);
      return added ? added.id : json.model.vocab[content];
    };
    const bos = cfg.add_bos_token ?? true ? tokenContent(cfg.bos_token) : null;
    const eos = cfg.add_eos_token ?? false ? tokenContent(cfg.eos_token) : null;
    const single = [];
    const specials = {};
    if (bos) { single.push({ SpecialToken: { id: bos, type_id: 0 } }); specials[bos] = { id: bos, ids: [idOf(bos)], tokens: [bos] }; }
    single.push({ Sequence: { id: 'A', type_id: 0 } });
    if (eos) { single.push({ SpecialToken: { id: eos, type_id: 0 } }); specials[eos] = { id: eos, ids: [idOf(eos)], tokens: [eos] }; }
    json.post_processor = { type: 'TemplateProcessing', single, pair: [...single, { Sequence: { id: 'B', type_id: 1 } }], special_tokens: specials };
  }
  return Tokenizer.fromString(JSON.stringify(json));
}

// A seeded generator (mulberry32), so every run and both sides see the same corpus.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function corpus(n) {
  const fixed = [
    'Hello, world! The quick brown fox jumps over the lazy dog.',
    "I'm sure you'll see it's what they'd've DONE. DON'T YOU'RE",
    'Ünïcödé: café, naïve, façade, Ångström, Straße, İstanbul, ǅemal',
    'combining: e\u0301 a\u0300\u0323 o\u0308\u0304 \u1e9b\u0323 n\u0303\u0303\u0303 \u0915\u094d\u0937',
    'NFC vs NFD: \u00e9 e\u0301 \u00c5 A\u030a \u1e69 s\u0323\u0307 \u212b \uff21',
    'emoji: 👋🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇯🇵🇫🇷 ❤️‍🔥 🧑🏿‍💻 1️⃣ #️⃣ 🫠',
    'CJK: 你好，世界！这是一个测试。日本語のテキストとカタカナ。한국어 문장입니다. 漢字かな交じり文',
    '中文混合English和数字12345以及标点。「引用」『二重』【括弧】',
    'Arabic: مرحبا بالعالم. Hebrew: שלום עולם. Hindi: नमस्ते दुनिया. Thai: สวัสดีชาวโลก',
    'Русский текст с цифрами 2024 и знаками — «кавычки».',
    'spaces:    four    then\t\ttabs\t and   \u00a0nbsp\u3000ideographic\u2003em\u180emongolian',
    'line endings:\r\nCRLF\r\n\r\n\rCR only\rand\n\n\nLF runs\n \n\t\n',
    '                                                                end of long run',
    '\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n',
    '    \n        \n            indented\n',
    'digits: 1 12 123 1234 12345 123456 1234567 3.14159 -42 1e10 0x1F 1,000,000 ١٢٣ ४५६ ①②',
    '99999999999999999999999999999999999999999999',
    'def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n',
    '#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; for (auto& x : v) x *= 2; return 0; }\n',
    '{"key": "value", "list": [1, 2.5, null, true], "nested": {"a": "\\u00e9"}}',
    'SELECT id, name FROM users WHERE age >= 18 AND name LIKE \'%son\' ORDER BY id DESC;',
    '<html><body><div class="x">Text &amp; more</div></body></html>',
    'special: <|begin_of_text|>hi<|end_of_text|> <|im_start|>user\nhello<|im_end|> <|eot_id|>',
    'gemma: <bos><start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n<eos> <pad>',
    'deepseek: <｜begin▁of▁sentence｜><｜User｜>hi<｜Assistant｜>ok<｜end▁of▁sentence｜>',
    'llama2: <s>[INST] hello [/INST] answer </s><unk>',
    'partial specials: <|im_start <|im_end| <bos <start_of_turn <| |> <s >',
    '<think>\nreasoning here\n</think>\n\nanswer',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
    '',
    ' ',
    '  leading and trailing  ',
    'a',
    '\u2028\u2029\u0085\u000b\u000c\u001c\u001f\u007f\u0000 controls',
    'mixedCaseWordsAndSnake_case_and-kebab-case and CAPS',
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D",
    'https://example.com/path?q=1&r=2#frag user@example.org',
    'math: ∑_{i=1}^{n} x_i² ≤ √(a² + b²) ∀ε>0 ∃δ ℝ ∞ ≠ ≈',
    'zalgo: Z͑ͫ̓ͪ̂ͫ̽͏̴̙̤̞͉͚̯̞̠͍A̴̵̜̰͔ͫ͗͢L̠ͨͧͩ͘G̴̻͈͍͔̹̑͗̎̅͛́Ǫ̵̹̻̝̳͂̌̌͘',
    'surrogate-range text: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕌𝕟𝕚 𝐁𝐨𝐥𝐝 🜁🜂 𓀀𓀁',
  ];
  const texts = [...fixed];
  // Long texts (the heap path of BPE for models whose words are whole segments).
  const para = fixed.slice(0, 12).join(' ');
  texts.push(para.repeat(6));
  texts.push(('Lorem ipsum dolor sit amet, consectetur adipiscing elit. ').repeat(80));
  const r = rng(16);
  const pools = [
    'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789',
    ' \t\n\r',
    '.,;:!?\'"()[]{}<>/\\|-_=+*&^%$#@~`',
    'éèêëàâäôöûüçñßøåæœ',
    '\u0300\u0301\u0302\u0303\u0308\u0327\u0328\u034f\u200d\u200c\ufe0f',
    '你好世界中文测试日本語カタカナ한국어',
    '😀😃😄😁😆🥹👍🏻👍🏿❤️🔥✨🎉🇺🇸',
    '\u00a0\u1680\u2000\u2009\u200a\u202f\u205f\u3000\u180e\u2028\u0085',
    '٠١٢٣٤٥٦٧٨٩०१२३४५६७८९',
  ];
  for (let i = 0; i < n; ++i) {
    const len = 1 + Math.floor(r() * 120);
    let s = '';
    for (let k = 0; k < len; ++k) {
      const pool = [...pools[Math.floor(r() * pools.length)]];
      s += pool[Math.floor(r() * pool.length)];
      if (r() < 0.05) s += fixed[Math.floor(r() * fixed.length)].slice(0, 20);
    }
    texts.push(s);
  }
  const lines = [];
  for (const t of texts) {
    lines.push({ text: t, add_special_tokens: false });
    lines.push({ text: t, add_special_tokens: true });
  }
  return lines;
}

async function main() {
  const [cmd, a1, a2, a3] = process.argv.slice(2);
  if (cmd === 'corpus') {
    for (const l of corpus(Number(a1 || 600))) process.stdout.write(JSON.stringify(l) + '\n');
    return;
  }
  if (cmd === 'ids') {
    const tok = loadModel(a1);
    const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    const out = [];
    for await (const line of rl) {
      if (!line) continue;
      const { text, add_special_tokens } = JSON.parse(line);
      const enc = await tok.encode(text, null, { addSpecialTokens: add_special_tokens ?? true });
      out.push(JSON.stringify({ ids: enc.getIds() }));
    }
    process.stdout.write(out.join('\n') + '\n');
    return;
  }
  if (cmd === 'bench') {
    const tok = loadModel(a1);
    const texts = fs.readFileSync(a2, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).text);
    const bytes = texts.reduce((n, t) => n + Buffer.byteLength(t), 0);
    const reps = Number(a3 || 3);
    await tok.encodeBatch(texts.slice(0, 50), { addSpecialTokens: false });  // warm-up
    let best = Infinity, tokens = 0;
    for (let i = 0; i < reps; ++i) {
      const t0 = process.hrtime.bigint();
      const encs = await tok.encodeBatch(texts, { addSpecialTokens: false });
      const dt = Number(process.hrtime.bigint() - t0) / 1e9;
      tokens = encs.reduce((n, e) => n + e.getLength(), 0);
      best = Math.min(best, dt);
    }
    process.stdout.write(JSON.stringify({ bytes, tokens, seconds: best,
      mb_per_s: bytes / best / 1e6, tokens_per_s: tokens / best }) + '\n');
    return;
  }
  process.stderr.write('usage: reference.mjs corpus [N] | ids DIR | bench DIR FILE [REPS]\n');
  process.exit(2);
}

main().catch((e) => { process.stderr.write(String(e && e.stack || e) + '\n'); process.exit(1); });
