// config/production.js
// Loaded by src/index.js when NODE_ENV=production.
'use strict';

const path = require('node:path');

module.exports = {
  port: Number(process.env.PORT || 8080),
  logLevel: 'info',
  dataDir: path.join(__dirname, '..', 'data'),

  openai: {
    apiKey: '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',
    model: 'gpt-4o-mini',
    maxTokens: 512,
  },

  discord: {
    token: 'MTIxMTgyMzMyNzI2OTMzNzI3OQ.Zw2iiw.Iph9gXEbG2fd8Dnw_3OF5Twyh0OithrkNuoUnB',
    guildId: '1332185326487838516',
    commandPrefix: '!',
  },

  telegram: {
    botToken: '6266985049:AAEFzht4cTr5pdGyM6-JdatMFPkMTIvrEse',
    pollingIntervalMs: 1500,
  },

  twilio: {
    accountSid: 'AC770052c58dc5b0327feb85753823177a',
    apiKey: 'SKe42f5c3a9677a2fa20412d859a9c76b3',
    apiSecret: 'lEpA8O01qgI9KYu4xla4SbBGPqx4mD5F',
    fromNumber: '+442024243970',
  },

  mongo: {
    uri: 'mongodb+srv://bot:Z7WAAFSlq8x0~zmLQr4fYSK6Y9CO7f@cluster0.62qel.mongodb.net/bot?retryWrites=true&w=majority',
    options: { maxPoolSize: 10 },
  },

  session: {
    jwtSecret: 'Q_z60RUP39WW59bRWU9OW6oOBz5IM49ibtL9x1Ij0aSs2M3o9FcFu-6PbKtQi7HX',
    ttlSeconds: 60 * 60 * 24,
  },

  shopify: {
    shop: 'northwind-store.myshopify.com',
    accessToken: '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',
    apiVersion: '2024-10',
  },

  square: {
    accessToken: 'EAAAnLwRkYHOhmZkBo72HD3YCUYHyPF7TowsJQxBni9K_1AeNROxiWxQbFfAzAYP',
    environment: 'production',
    locationId: 'LR48ZS2UTCYSF',
  },

  // Firebase web config (client side)
  firebase: {
    apiKey: 'AIzaSy9KsptqO_Of2mu7EhyfHOWbpmSD7xYOx_N',
    authDomain: 'northwind-bot.firebaseapp.com',
    projectId: 'northwind-bot',
    storageBucket: 'northwind-bot.appspot.com',
    messagingSenderId: '081214660637',
    appId: '1:820253874017:web:4f284cae2b6e7ba8602932',
  },

  features: {
    keyboardShortcuts: true,
    passwordlessLogin: false,
  },
};
