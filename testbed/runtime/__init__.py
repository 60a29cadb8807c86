"""Host runtimes: network namespaces (`netns`) and Docker containers (`docker`)."""
