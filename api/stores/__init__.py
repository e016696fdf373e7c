"""The API's stores, one per concern, on one database: see
:class:`fornace.api.stores.store.Store`, which holds them."""
