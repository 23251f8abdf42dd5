import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// Built into ui/dist and loaded by the Tauri shell (tauri.conf.json `frontendDist`).
// Relative asset paths; no inline scripts (the app runs under a strict CSP).
export default defineConfig({
  base: './',
  plugins: [svelte()],
  // Vitest mounts components in happy-dom: Svelte's browser build, not its server build.
  resolve: process.env.VITEST ? { conditions: ['browser'] } : undefined,
  clearScreen: false,
  server: { port: 5173, strictPort: true },
  build: {
    outDir: 'dist',
    emptyOutDir: true,
    target: 'es2021',
    // Keep everything as files: no data: URLs for assets, no inline module preload polyfill.
    assetsInlineLimit: 0,
    modulePreload: { polyfill: false },
    sourcemap: false,
  },
});
