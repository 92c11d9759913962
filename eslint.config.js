// Lint: typescript-eslint's recommended type-aware rules over the service, its scripts, the
// benchmark and the tests. Which layer may import which is dependency-cruiser's
// (.dependency-cruiser.cjs); import cycles are madge's.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'var/**', 'test/fixtures/**', '**/*.mjs', '**/*.cjs', '*.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
  },
  {
    // Tests read JSON bodies and SSE chunks as whatever the service sent: `any` there is the
    // point (the assertions check the shape), so the rules against untyped values are off.
    files: ['test/**/*.ts', 'src/**/*.test.ts', 'src/**/*.fake.ts', 'src/**/testing/**/*.ts'],
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
    },
  },
);
