// @huggingface/jinja with Python's strip semantics. Version 0.5.11 implements str.strip/lstrip/
// rstrip with JavaScript's trim (the chars argument is ignored: "\n\n  a".lstrip("\n") gives "a",
// Python gives "  a") and the `trim` filter with JavaScript's whitespace set. Chat templates use
// both (Qwen3: content.lstrip('\n'); Llama-3: content | trim), so the fixture generator loads a
// copy of the library with those four places replaced by Python's behaviour.
import { readFileSync, writeFileSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// Python's str.isspace() and str.strip([chars]).
const HELPER = `
const __pySpace = (c) => { const p = c.codePointAt(0);
  return (p >= 0x09 && p <= 0x0d) || (p >= 0x1c && p <= 0x20) || p === 0x85 || p === 0xa0 ||
    p === 0x1680 || (p >= 0x2000 && p <= 0x200a) || p === 0x2028 || p === 0x2029 || p === 0x202f ||
    p === 0x205f || p === 0x3000; };
function __pyStrip(s, args, left, right) {
  const chars = args && args.length && args[0] && typeof args[0].value === "string" ? [...args[0].value] : null;
  const strip = (c) => (chars ? chars.includes(c) : __pySpace(c));
  const cs = [...s]; let b = 0, e = cs.length;
  while (left && b < e && strip(cs[b])) b++;
  while (right && e > b && strip(cs[e - 1])) e--;
  return cs.slice(b, e).join("");
}
`;

const REPLACEMENTS = [
  ["new FunctionValue(() => {\n          return new StringValue(this.value.trim());",
   "new FunctionValue((args) => {\n          return new StringValue(__pyStrip(this.value, args, true, true));"],
  ["new FunctionValue(() => {\n          return new StringValue(this.value.trimEnd());",
   "new FunctionValue((args) => {\n          return new StringValue(__pyStrip(this.value, args, false, true));"],
  ["new FunctionValue(() => {\n          return new StringValue(this.value.trimStart());",
   "new FunctionValue((args) => {\n          return new StringValue(__pyStrip(this.value, args, true, false));"],
  ['case "trim":\n            return new StringValue(operand.value.trim());',
   'case "trim":\n            return new StringValue(__pyStrip(operand.value, null, true, true));'],
];

export async function loadPythonLikeJinja() {
  const path = fileURLToPath(import.meta.resolve("@huggingface/jinja"));
  let src = readFileSync(path, "utf8");
  for (const [from, to] of REPLACEMENTS) {
    if (!src.includes(from)) throw new Error(`py_jinja.mjs: @huggingface/jinja changed; '${from.slice(0, 60)}' not found`);
    src = src.replace(from, to);
  }
  const file = join(mkdtempSync(join(tmpdir(), "dflash-jinja-")), "index.mjs");
  writeFileSync(file, HELPER + src);
  return import(pathToFileURL(file).href);
}
