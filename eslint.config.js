// Lint: typescript-eslint's recommended type-aware rules over the service, its scripts, the
// benchmark, the tests and the console. Which layer may import which, and import cycles, are
// dependency-cruiser's (.dependency-cruiser.cjs). `npm test` runs both before the suite.
import js from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'var/**', 'test/fixtures/**', '**/*.mjs', '**/*.cjs', '*.config.js'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      // `const { secret: _omit, ...rest } = row` leaves a field out on purpose.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' },
      ],
      // A type-only import says so, so the emitted code (and dependency-cruiser) can tell a type from a runtime edge.
      '@typescript-eslint/consistent-type-imports': ['error', { fixStyle: 'inline-type-imports' }],
    },
  },
  // Layout is Prettier's (`npm run format`, checked by `npm run lint`): no lint rule argues with it.
  prettier,
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
      // chai's property assertions (`expect(x).to.be.empty`) are expressions by design.
      '@typescript-eslint/no-unused-expressions': 'off',
      // mocha hooks and stubs are async to fit their callers, with or without an await.
      '@typescript-eslint/require-await': 'off',
    },
  },
);
