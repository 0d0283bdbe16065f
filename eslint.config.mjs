// ESLint flat config for the VS Code extension (TypeScript, type-aware rules).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'out/**', 'node_modules/**', '.venv/**', 'tests/**', 'extension/build.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    files: ['extension/**/*.ts'],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      '@typescript-eslint/no-unnecessary-condition': ['error', { allowConstantLoopConditions: true }],
      eqeqeq: ['error', 'always'],
      curly: ['error', 'all'],
    },
  },
  {
    // The core is unit-tested under plain Node: it must not depend on the editor.
    files: ['extension/src/core/**/*.ts', 'extension/test/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { paths: [{ name: 'vscode', message: 'src/core and tests run without VS Code.' }] }],
    },
  },
  {
    files: ['extension/test/**/*.ts'],
    rules: {
      // node:test's describe/it return promises the runner awaits itself.
      '@typescript-eslint/no-floating-promises': [
        'error',
        { allowForKnownSafeCalls: [{ from: 'package', package: 'node:test', name: ['describe', 'it', 'test'] }] },
      ],
    },
  },
);
