"""neuralbake inside other tools: add-ons that run in a host application's own Python and reach
neuralbake through its command line or its service (:mod:`neuralbake.client`), never by importing the
bakes. :mod:`~neuralbake.integrations.blender` is the Blender add-on."""
