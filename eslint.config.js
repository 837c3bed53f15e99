// The lint CI runs (`pnpm lint`): the rules that catch what a lock library cannot afford and the
// type checker does not see. A promise nobody awaits or handles is a wait with no deadline, or an
// error nobody hears (an unhandled rejection kills a Node process); an async function passed where a
// plain callback is expected loses its rejection the same way. The tests are held to the same rules:
// a floating promise in a test is a failure nobody hears, or a test that ends before its check.
import tseslint from 'typescript-eslint';

const common = {
  plugins: { '@typescript-eslint': tseslint.plugin },
  linterOptions: { reportUnusedDisableDirectives: 'error' },
  rules: {
    '@typescript-eslint/no-floating-promises': 'error',
    '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { arguments: false } }],
    '@typescript-eslint/await-thenable': 'error',
    '@typescript-eslint/no-unused-vars': ['error', { args: 'none', ignoreRestSiblings: true }],
    '@typescript-eslint/no-explicit-any': 'error',
  },
};

export default tseslint.config(
  { ignores: ['**/dist/**', '**/node_modules/**', 'test-matrix/.state/**'] },
  {
    ...common,
    files: ['packages/*/src/**/*.ts', 'examples/*/src/**/*.ts'],
    languageOptions: { parser: tseslint.parser, parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
  },
  {
    // The tests belong to no package's tsconfig (they are not built): the type-check project has them.
    ...common,
    files: ['packages/*/test/**/*.ts', 'test/**/*.ts'],
    languageOptions: {
      parser: tseslint.parser,
      parserOptions: { project: ['./tsconfig.check.json'], tsconfigRootDir: import.meta.dirname },
    },
  },
);
