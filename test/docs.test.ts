/**
 * The guides under docs/ and the README: every TypeScript example in them compiles, strict, as a
 * module of its own against the packages (a few seconds), and every guide ends with runnable code.
 * The JavaScript examples that run as written are run by packages/backend-redis/test/readme.test.ts.
 */
import { execFile } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('..', import.meta.url));
const guides = readdirSync(join(root, 'docs'))
  .filter((f) => f.endsWith('.md'))
  .map((f) => `docs/${f}`);
/** Inside the repository, so that the examples' imports resolve as a user's would, to the built packages. */
const scratch = join(root, 'test', `.docs-examples-${process.pid}`);
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The ```ts blocks of a Markdown file, with the line each starts on. */
function examples(file: string): { line: number; code: string }[] {
  const text = readFileSync(join(root, file), 'utf8');
  return [...text.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => ({ line: text.slice(0, m.index).split('\n').length, code: m[1]! }));
}

/** The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, spaces as dashes. */
function headings(markdown: string): string[] {
  return [...markdown.replace(/^```[\s\S]*?^```$/gm, '').matchAll(/^#+ (.*)$/gm)].map((m) =>
    m[1]!
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-'),
  );
}

describe('docs', () => {
  it('the guides the README links to are there', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    for (const guide of guides) expect(readme, `the README links to ${guide}`).toContain(`](${guide})`);
    for (const [, link] of readme.matchAll(/\]\((docs\/[^)#]+)/g)) expect(guides, `README links to ${link}`).toContain(link);
    expect(guides.length).toBeGreaterThanOrEqual(8);
  });

  it('every guide ends with runnable code: its last section has a code block', () => {
    for (const guide of guides) {
      const text = readFileSync(join(root, guide), 'utf8');
      const last = text.split(/^## /m).at(-1)!;
      expect(/^```(ts|js|sh)$/m.test(last), `${guide}: the last section has no code`).toBe(true);
    }
  });

  it("every relative link in the README, the guides and the packages' READMEs reaches a file, and a heading there", () => {
    const docs = ['README.md', 'TESTING.md', ...guides, ...readdirSync(join(root, 'packages')).map((p) => `packages/${p}/README.md`)];
    const broken: string[] = [];
    for (const doc of docs) {
      if (!existsSync(join(root, doc))) continue;
      const text = readFileSync(join(root, doc), 'utf8').replace(/^```[\s\S]*?^```$/gm, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/.test(target!)) continue;
        const [path, anchor] = target!.split('#') as [string, string | undefined];
        const file = path === '' ? join(root, doc) : join(root, dirname(doc), path);
        if (!existsSync(file)) broken.push(`${doc}: ${target} (no such file)`);
        else if (anchor && statSync(file).isFile() && !headings(readFileSync(file, 'utf8')).includes(anchor))
          broken.push(`${doc}: ${target} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('every TypeScript example in the README and the guides compiles (strict, ES modules, nodenext)', async () => {
    mkdirSync(scratch, { recursive: true });
    const files: string[] = [];
    for (const doc of ['README.md', ...guides])
      for (const { line, code } of examples(doc)) {
        const name = `${doc.replace(/\W/g, '_')}_${line}.ts`;
        // `export {}`: a module even without an import, for top-level await.
        writeFileSync(join(scratch, name), `${code}\nexport {};\n`);
        files.push(name);
      }
    expect(files.length).toBeGreaterThan(12);
    writeFileSync(
      join(scratch, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          noEmit: true,
          target: 'ES2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          lib: ['ES2023', 'ESNext.Disposable'],
          types: ['node'],
          skipLibCheck: true,
        },
        files,
      }),
    );
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    const ran = await promisify(execFile)(process.execPath, [tsc, '-p', join(scratch, 'tsconfig.json')], { cwd: root }).catch(
      (error: { stdout?: string }) => error,
    );
    // Each error names the file, which names the document and the line its example starts on.
    expect(ran.stdout ?? '').toBe('');
  }, 120_000);
});
