// A small client of the `graphql-transport-ws` protocol for the dashboard, written out
// rather than vendoring `graphql-ws` so the page needs no build step and the whole protocol
// fits on one screen: connection_init/ack, subscribe/next/error/complete, ping/pong.
//
// It reconnects by itself with exponential back-off (0.5 s doubling to 8 s, with jitter)
// and subscribes again to everything still wanted; the server's subscriptions send the
// current state first, so a page resynchronises on every reconnect.
//
//   const client = new GraphQLWsClient(url, { connectionParams: () => ({ Authorization: … }),
//                                            onStatus: status => … });
//   const stop = client.subscribe({ query, variables }, { next(data) {}, error(errors) {} });

class GraphQLWsClient {
  constructor(url, { connectionParams = () => ({}), onStatus = () => {} } = {}) {
    this.url = url;
    this.connectionParams = connectionParams;
    this.onStatus = onStatus;
    this.subscriptions = new Map(); // id -> { payload, sink }
    this.nextId = 1;
    this.attempt = 0;
    this.socket = null;
    this.acknowledged = false;
    this.connect();
  }

  connect() {
    this.onStatus(this.attempt === 0 ? 'connecting' : 'reconnecting');
    const socket = new WebSocket(this.url, 'graphql-transport-ws');
    this.socket = socket;
    this.acknowledged = false;
    socket.onopen = () => {
      socket.send(JSON.stringify({ type: 'connection_init', payload: this.connectionParams() }));
    };
    socket.onmessage = (event) => this.receive(JSON.parse(event.data));
    socket.onclose = (event) => {
      if (this.socket !== socket) return;
      this.socket = null;
      this.acknowledged = false;
      // 4403: the token was refused; retrying with the same token cannot help.
      if (event.code === 4403) {
        this.onStatus('unauthorized');
        return;
      }
      this.scheduleReconnect();
    };
  }

  // Closes for good, without reconnecting (a page given another token opens a new client).
  close() {
    this.closed = true;
    const socket = this.socket;
    this.socket = null;
    socket?.close();
  }

  scheduleReconnect() {
    if (this.closed) return;
    const delay = Math.min(8000, 500 * 2 ** this.attempt) * (0.75 + Math.random() / 2);
    this.attempt += 1;
    this.onStatus('reconnecting');
    setTimeout(() => this.closed || this.connect(), delay);
  }

  receive(message) {
    switch (message.type) {
      case 'connection_ack':
        this.acknowledged = true;
        this.attempt = 0;
        this.onStatus('live');
        for (const id of this.subscriptions.keys()) this.sendSubscribe(id);
        break;
      case 'ping':
        this.send({ type: 'pong' });
        break;
      case 'next': {
        const subscription = this.subscriptions.get(message.id);
        if (!subscription) break;
        if (message.payload.errors) subscription.sink.error?.(message.payload.errors);
        if (message.payload.data) subscription.sink.next(message.payload.data);
        break;
      }
      case 'error': {
        const subscription = this.subscriptions.get(message.id);
        this.subscriptions.delete(message.id);
        subscription?.sink.error?.(message.payload);
        break;
      }
      case 'complete':
        this.subscriptions.delete(message.id);
        break;
    }
  }

  send(message) {
    if (this.socket && this.socket.readyState === WebSocket.OPEN) {
      this.socket.send(JSON.stringify(message));
    }
  }

  sendSubscribe(id) {
    this.send({ id, type: 'subscribe', payload: this.subscriptions.get(id).payload });
  }

  // Subscribes now, and again after every reconnect; returns a function that ends it.
  subscribe(payload, sink) {
    const id = String(this.nextId++);
    this.subscriptions.set(id, { payload, sink });
    if (this.acknowledged) this.sendSubscribe(id);
    return () => {
      if (this.subscriptions.delete(id)) this.send({ id, type: 'complete' });
    };
  }
}

window.GraphQLWsClient = GraphQLWsClient;
