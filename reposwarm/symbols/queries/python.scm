; Definitions
(class_definition
  name: (identifier) @name.definition.class) @definition.class

(function_definition
  name: (identifier) @name.definition.function) @definition.function

(module
  (expression_statement
    (assignment
      left: (identifier) @name.definition.variable) @definition.variable))

; References
(call
  function: (identifier) @name.reference.call)

(call
  function: (attribute
    attribute: (identifier) @name.reference.call))

(decorator
  (identifier) @name.reference.call)

(decorator
  (call
    function: (identifier) @name.reference.call))

(class_definition
  superclasses: (argument_list
    (identifier) @name.reference.class))

(class_definition
  superclasses: (argument_list
    (attribute
      attribute: (identifier) @name.reference.class)))

(type
  (identifier) @name.reference.type)

(type
  (generic_type
    (identifier) @name.reference.type))

(type
  (string
    (string_content) @name.reference.type
    (#match? @name.reference.type "^[A-Za-z_][A-Za-z0-9_]*$")))

(import_from_statement
  name: (dotted_name
    (identifier) @name.reference.import))

(import_from_statement
  name: (aliased_import
    name: (dotted_name
      (identifier) @name.reference.import)))

(import_from_statement
  module_name: (dotted_name
    (identifier) @name.reference.import))

(import_statement
  name: (dotted_name
    (identifier) @name.reference.import))

(import_statement
  name: (aliased_import
    name: (dotted_name
      (identifier) @name.reference.import)))
